# SPDX-License-Identifier: Apache-2.0
"""A training loop on synthetic data that reports its throughput in fixed windows.

Used by rate_control.sh, convergence.sh and memory.sh: every process of one measurement gets
the same --start-at (a Unix time), trains until then to warm up, then counts iterations in
--windows windows of --window-s seconds and prints one JSON line with the rate of each window.

Models: torchvision image classifiers (bf16 autocast, SGD with momentum); `dlrm`, a DLRM-like,
memory-heavy recommendation model (--dlrm-tables embedding tables of --dlrm-rows x --dlrm-dim
fp32, each its own allocation, sparse gradients, plain SGD: the tables are the footprint); and
`bert_base`, a BERT-base-like encoder from torch.nn (MLM-style head, AdamW, bf16 autocast).
"""
import argparse
import json
import os
import signal
import sys
import time

import torch
import torchvision

IMAGE_MODELS = ["resnet50", "shufflenet_v2_x1_0", "mobilenet_v2", "resnet18"]
DEFAULT_BATCH = {"dlrm": 2048, "bert_base": 32}  # every other model: 64

# Set by SIGTERM in the modes that handle it (--timeline-s, --keep-running-s): stop at the next
# iteration boundary and report what was done.
stop_requested = False


def on_term(signum, frame) -> None:
    global stop_requested
    stop_requested = True


class Dlrm(torch.nn.Module):
    """DLRM-like: bottom MLP on 13 dense features, sum-pooled embedding bags, pairwise dot
    interaction, top MLP to one logit (Naumov et al., 2019; the Criteo layout)."""

    def __init__(self, tables: int, rows: int, dim: int, device: torch.device) -> None:
        super().__init__()
        # One EmbeddingBag per table, created on the device: each table is its own tensor, so
        # its own allocation (a separate cudaMalloc segment of the caching allocator).
        self.tables = torch.nn.ModuleList(
            torch.nn.EmbeddingBag(rows, dim, mode="sum", sparse=True, device=device) for _ in range(tables))
        bound = (1.0 / rows) ** 0.5  # as the DLRM reference initializes its tables
        with torch.no_grad():
            for t in self.tables:
                t.weight.uniform_(-bound, bound)
        self.bottom = torch.nn.Sequential(
            torch.nn.Linear(13, 512), torch.nn.ReLU(), torch.nn.Linear(512, 256), torch.nn.ReLU(),
            torch.nn.Linear(256, dim), torch.nn.ReLU()).to(device)
        n = tables + 1
        self.register_buffer("pair_i", torch.triu_indices(n, n, offset=1, device=device)[0], persistent=False)
        self.register_buffer("pair_j", torch.triu_indices(n, n, offset=1, device=device)[1], persistent=False)
        self.top = torch.nn.Sequential(
            torch.nn.Linear(dim + n * (n - 1) // 2, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024),
            torch.nn.ReLU(), torch.nn.Linear(1024, 512), torch.nn.ReLU(), torch.nn.Linear(512, 256),
            torch.nn.ReLU(), torch.nn.Linear(256, 1)).to(device)

    def forward(self, dense: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
        x = self.bottom(dense)                                   # (B, dim)
        pooled = [t(indices[k]) for k, t in enumerate(self.tables)]  # each (B, dim)
        features = torch.stack([x] + pooled, dim=1)              # (B, n, dim)
        dots = torch.bmm(features, features.transpose(1, 2))     # (B, n, n)
        pairs = dots[:, self.pair_i, self.pair_j]                # (B, n(n-1)/2)
        return self.top(torch.cat([x, pairs], dim=1)).squeeze(1)


class BertBase(torch.nn.Module):
    """BERT-base-like encoder from torch.nn only: token + learned position embeddings, 12 post-norm
    layers of 12 heads, FFN 3072 with GELU, and an MLM-style head over the vocabulary."""

    def __init__(self, seq_len: int, vocab: int = 30522, hidden: int = 768, layers: int = 12,
                 heads: int = 12, ffn: int = 3072) -> None:
        super().__init__()
        self.tokens = torch.nn.Embedding(vocab, hidden)
        self.positions = torch.nn.Embedding(max(512, seq_len), hidden)
        self.norm = torch.nn.LayerNorm(hidden)
        self.dropout = torch.nn.Dropout(0.1)
        layer = torch.nn.TransformerEncoderLayer(hidden, heads, ffn, dropout=0.1, activation="gelu",
                                                 batch_first=True, norm_first=False)
        self.encoder = torch.nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = torch.nn.Linear(hidden, vocab)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(ids.shape[1], device=ids.device)
        x = self.dropout(self.norm(self.tokens(ids) + self.positions(pos)))
        return self.head(self.encoder(x))


def dlrm_indices(rows: int, shape: tuple, zipf: float, device: torch.device) -> torch.Tensor:
    """Row ids for the embedding lookups: uniform over [0, rows) when `zipf` is 0, else a
    power law with exponent `zipf` whose hot rows come first (id k drawn with probability about
    proportional to (k + 1)^-zipf), as in a table whose ids were ordered by frequency. Drawn by
    inverting the continuous power law's CDF on [1, rows + 1) and flooring."""
    if zipf == 0:
        return torch.randint(0, rows, shape, device=device)
    u = torch.rand(shape, device=device, dtype=torch.float64)
    n = float(rows + 1)
    if abs(zipf - 1.0) < 1e-9:
        x = torch.pow(n, u)  # CDF ln(x) / ln(n)
    else:
        a = 1.0 - zipf
        x = torch.pow((n ** a - 1.0) * u + 1.0, 1.0 / a)  # CDF (x^a - 1) / (n^a - 1)
    return (x.floor().long() - 1).clamp_(0, rows - 1)


def build(args, device: torch.device):
    """The model's training step (one host sync, as a loop that logs its loss has)."""
    if args.model == "dlrm":
        model = Dlrm(args.dlrm_tables, args.dlrm_rows, args.dlrm_dim, device)
        # Plain SGD without momentum or weight decay: sparse gradients are supported and there
        # is no optimizer state, so the memory is the tables. The per-tensor loop (foreach=False)
        # is the path that applies sparse gradients; the dense MLPs are a dozen tensors.
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01, foreach=False)
        loss_fn = torch.nn.BCEWithLogitsLoss()
        dense = torch.randn(args.batch, 13, device=device)
        indices = dlrm_indices(args.dlrm_rows, (args.dlrm_tables, args.batch, args.dlrm_bag), args.dlrm_zipf, device)
        labels = torch.randint(0, 2, (args.batch,), device=device).float()

        def step() -> None:
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(model(dense, indices), labels)  # fp32 throughout
            loss.backward()
            optimizer.step()
            loss.item()
        return step

    if args.model == "bert_base":
        vocab = 30522
        model = BertBase(args.seq_len, vocab).to(device)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        loss_fn = torch.nn.CrossEntropyLoss()
        ids = torch.randint(0, vocab, (args.batch, args.seq_len), device=device)
        labels = torch.randint(0, vocab, (args.batch, args.seq_len), device=device)

        def step() -> None:
            optimizer.zero_grad(set_to_none=True)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = loss_fn(model(ids).reshape(-1, vocab), labels.reshape(-1))
            loss.backward()
            optimizer.step()
            loss.item()
        return step

    model = getattr(torchvision.models, args.model)(num_classes=1000).to(device).to(memory_format=torch.channels_last)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    images = torch.randn(args.batch, 3, 224, 224, device=device).to(memory_format=torch.channels_last)
    labels = torch.randint(0, 1000, (args.batch,), device=device)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = loss_fn(model(images), labels)
        loss.backward()
        optimizer.step()
        # One host sync per iteration, as a training loop that logs its loss has.
        loss.item()
    return step


def emit(record: dict) -> None:
    """One result line on stdout in a single write(2). Both jobs of a run append to one file and
    PYTHONUNBUFFERED makes print() write the text and its newline separately, so two jobs that
    finish together could interleave into one unreadable line."""
    os.write(sys.stdout.fileno(), (json.dumps(record) + "\n").encode())


def memory_fields() -> dict:
    return {"peak_reserved_bytes": torch.cuda.max_memory_reserved(),
            "peak_allocated_bytes": torch.cuda.max_memory_allocated()}


def no_core_dump() -> None:
    """No core file when this process is killed by a signal (memory.sh sends SIGSEGV on purpose;
    a core of a process with many GiB mapped would take minutes and disk)."""
    import ctypes
    import resource
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    try:
        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4, off
    except (OSError, AttributeError):
        pass


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", required=True, choices=IMAGE_MODELS + ["dlrm", "bert_base"])
    parser.add_argument("--batch", type=int, default=None,
                        help="batch size (default 64; dlrm 2048, bert_base 32)")
    parser.add_argument("--start-at", type=float, default=None,
                        help="Unix time the first window starts (required unless --report-memory-only)")
    parser.add_argument("--windows", type=int, default=3)
    parser.add_argument("--window-s", type=float, default=8.0)
    parser.add_argument("--label", default="")
    parser.add_argument("--timeline-s", type=float, default=0.0,
                        help="Instead of windows: train this many seconds from --start-at and "
                             "print iterations completed in each second (for convergence times); "
                             "SIGTERM ends it early and still prints")
    parser.add_argument("--pause-at", type=float, default=-1.0,
                        help="With --timeline-s: seconds after --start-at at which to stop "
                             "launching work (the job idles, as between epochs)")
    parser.add_argument("--pause-s", type=float, default=0.0, help="Length of that pause")
    parser.add_argument("--keep-running-s", type=float, default=0.0,
                        help="In windows mode: after printing the result, go on training for up to "
                             "this many seconds (until SIGTERM), so that a script can act on "
                             "running jobs")
    parser.add_argument("--report-memory-only", action="store_true",
                        help="Build the model, run 3 training steps, print the peak reserved and "
                             "allocated bytes as one JSON line and exit")
    parser.add_argument("--idle-after-steps", type=int, default=0,
                        help="Run this many training steps, print the memory as one JSON line, then "
                             "hold that memory and launch nothing until SIGTERM (a job between "
                             "epochs); no --start-at needed")
    parser.add_argument("--no-core-dump", action="store_true",
                        help="Write no core file if killed by a signal")
    parser.add_argument("--seq-len", type=int, default=128, help="bert_base: sequence length")
    parser.add_argument("--dlrm-tables", type=int, default=8, help="dlrm: embedding tables")
    parser.add_argument("--dlrm-rows", type=int, default=2_000_000, help="dlrm: rows per table")
    parser.add_argument("--dlrm-dim", type=int, default=256, help="dlrm: embedding dimension")
    parser.add_argument("--dlrm-bag", type=int, default=32, help="dlrm: indices per bag (per sample and table)")
    parser.add_argument("--dlrm-zipf", type=float, default=0.0,
                        help="dlrm: 0 (default) draws row ids uniformly; S > 0 draws them from a power law "
                             "with exponent S, hot rows first (a table ordered by frequency)")
    args = parser.parse_args()
    if args.start_at is None and not args.report_memory_only and args.idle_after_steps <= 0:
        parser.error("--start-at is required (unless --report-memory-only or --idle-after-steps)")
    if args.idle_after_steps < 0:
        parser.error("--idle-after-steps must be at least 0")
    if not 0.0 <= args.dlrm_zipf <= 10.0:
        parser.error(f"--dlrm-zipf must be in [0, 10] (got {args.dlrm_zipf})")
    if args.batch is None:
        args.batch = DEFAULT_BATCH.get(args.model, 64)
    if args.no_core_dump:
        no_core_dump()

    # No cuDNN autotuning: a throttled opportunistic job would spend minutes autotuning, and the
    # chosen kernels would differ between runs of one measurement.
    torch.backends.cudnn.benchmark = False
    device = torch.device("cuda")
    step = build(args, device)

    if args.report_memory_only:
        for _ in range(3):
            step()
        torch.cuda.synchronize()
        emit({"model": args.model, "batch": args.batch, **memory_fields()})
        return 0

    if args.idle_after_steps > 0:
        signal.signal(signal.SIGTERM, on_term)
        for _ in range(args.idle_after_steps):
            step()
        torch.cuda.synchronize()
        emit({"label": args.label, "model": args.model, "batch": args.batch,
              "idle_after_steps": args.idle_after_steps, **memory_fields()})
        while not stop_requested:
            time.sleep(0.1)
        return 0

    if args.timeline_s > 0:
        signal.signal(signal.SIGTERM, on_term)
        # Per-second progress on the shared clock, from the job's first step (it may arrive
        # before or after --start-at; seconds are relative to --start-at).
        counts = {}
        loop_start = time.time() - args.start_at
        end = args.start_at + args.timeline_s
        paused = False
        while time.time() < end and not stop_requested:
            now = time.time() - args.start_at
            if args.pause_at >= 0 and args.pause_at <= now < args.pause_at + args.pause_s:
                paused = True
                time.sleep(0.01)
                continue
            step()
            second = int(time.time() - args.start_at)
            counts[second] = counts.get(second, 0) + 1
        first = min(counts) if counts else 0
        last = int(args.timeline_s)
        if stop_requested:  # ended early: up to the last second that ran
            last = min(last, int(time.time() - args.start_at) + 1)
        timeline = [counts.get(t, 0) for t in range(first, last)]
        emit({"label": args.label, "model": args.model, "batch": args.batch,
              "first_second": first, "loop_start_s": loop_start, "paused": paused, "per_second": timeline,
              "stopped_early": stop_requested, **memory_fields()})
        return 0

    # Warm up until the shared start, then count iterations in windows on the shared clock, so
    # the jobs of one measurement are measured over the same seconds. A job that is not ready
    # (still loading, or held by a rate controller) makes no progress in a window: that is its
    # throughput there, not an error.
    while time.time() < args.start_at:
        step()
    ready = time.time()
    rates = []
    # The process's CPU time per counted iteration (all its threads): beside the wall time, it
    # tells a job slowed on its host side (less CPU time per second, e.g. descheduled) from one
    # that spins in its synchronisation calls while the GPU is busy (the default for a process
    # with fewer contexts than cores).
    cpu_ms_per_it = []
    for w in range(args.windows):
        begin = args.start_at + w * args.window_s
        end = begin + args.window_s
        count = 0
        cpu_begin = None
        while time.time() < end:
            step()
            if time.time() >= begin:
                count += 1
                if cpu_begin is None:  # the CPU time of the iterations after this one
                    cpu_begin = time.process_time()
        rates.append(count / args.window_s)
        cpu_ms_per_it.append((time.process_time() - cpu_begin) * 1e3 / (count - 1) if count > 1 else None)
    if ready - args.start_at > 1.0:
        print(f"{args.label}: ready {ready - args.start_at:.1f} s after the shared start",
              file=sys.stderr)
    emit({"label": args.label, "model": args.model, "batch": args.batch, "pid": os.getpid(),
          "ready_late_s": max(0.0, ready - args.start_at), "it_per_s": rates, "cpu_ms_per_it": cpu_ms_per_it,
          "reserved_bytes": torch.cuda.memory_reserved(), **memory_fields()})
    if args.keep_running_s > 0:
        signal.signal(signal.SIGTERM, on_term)
        end = args.start_at + args.windows * args.window_s + args.keep_running_s
        while time.time() < end and not stop_requested:
            step()
    return 0


if __name__ == "__main__":
    sys.exit(main())
