# SPDX-License-Identifier: Apache-2.0
"""A training job on synthetic data that reports its throughput in windows (bench/gpu/harness.py).

From its first step on, a thread prints every --window-s seconds (also while the job is held in
a launch) {"event": "window", "t": Unix time, "iterations", "iter_per_s", "window_s"}. Between
SIGUSR1 and SIGUSR2 it launches nothing and holds its memory (an idle phase). SIGTERM ends it after
the step with {"event": "end", ...}: peak memory and hot set (the bytes a step touches), after
{"event": "kernels"} of --kernel-stats-steps steps under torch.profiler (busy fraction, kernels and
idle GPU gaps per step). Models: torchvision classifiers (bf16 autocast, SGD with momentum); `dlrm`,
DLRM-like (--dlrm-tables tables of --dlrm-rows x --dlrm-dim fp32, one allocation each, sparse
gradients, plain SGD: the tables are the footprint); `bert_base`, a BERT-base-like encoder (MLM-style
head, AdamW, bf16). One host sync per step, as a loop that logs its loss has. --report-memory-only:
3 steps, one memory line, exit.
"""
import argparse
import json
import os
import signal
import sys
import threading
import time

def emit(record: dict) -> None:
    """One line in a single write(2): the window thread and the main thread both print."""
    os.write(sys.stdout.fileno(), (json.dumps(record) + "\n").encode())


class Windows:
    """Counts steps and, from the first one on, prints a window line every `window_s` seconds."""

    def __init__(self, window_s: float, out=emit, clock=time.time) -> None:
        self.window_s, self.out, self.clock, self.iterations = window_s, out, clock, 0
        self.first, self.stopped = threading.Event(), threading.Event()
        threading.Thread(target=self.run, daemon=True).start()

    def step_done(self) -> None:
        self.iterations += 1
        if not self.first.is_set():  # windows count the steps after the first (set-up, allocation)
            self.start = (self.clock(), self.iterations)
            self.first.set()

    def run(self) -> None:
        self.first.wait()
        t, n = self.start
        while not self.stopped.wait(max(0.0, t + self.window_s - self.clock())):
            now, count = self.clock(), self.iterations
            if now - t >= self.window_s:
                self.out({"event": "window", "t": now, "iterations": count,
                          "iter_per_s": (count - n) / (now - t), "window_s": now - t})
                t, n = now, count


def span_stats(spans: list, steps: int, wall_s: float) -> dict:
    """Per step of STEPS: the kernels' (start, end) spans (us) as busy fraction of WALL_S, kernels, idle gaps."""
    busy, gaps, end = 0.0, 0, float("-inf")
    for a, b in sorted(spans):
        gaps, busy, end = gaps + (a > end), busy + max(0.0, b - max(a, end)), max(end, b)
    return {"event": "kernels", "busy_fraction": min(1.0, busy / 1e6 / wall_s), "kernels_per_step": len(spans) / steps,
            "gaps_per_step": gaps / steps}


def build(args, torch, device):
    """(step, hot-set bytes beyond what every step touches in full): a step returns its loss."""
    if args.model == "dlrm":
        n = args.dlrm_tables + 1

        def mlp(*sizes):
            layers = [m for a, b in zip(sizes, sizes[1:]) for m in (torch.nn.Linear(a, b), torch.nn.ReLU())]
            return torch.nn.Sequential(*layers[:-1]).to(device)
        # Bottom MLP on 13 dense features, sum-pooled embedding bags, pairwise dot interaction, top
        # MLP to a logit (Naumov et al., 2019; the Criteo layout). Each table is its own tensor,
        # so its own allocation, initialized as the DLRM reference does.
        tables = torch.nn.ModuleList(torch.nn.EmbeddingBag(args.dlrm_rows, args.dlrm_dim, mode="sum", sparse=True,
                                                           device=device) for _ in range(args.dlrm_tables))
        with torch.no_grad():
            for t in tables:
                t.weight.uniform_(-(1.0 / args.dlrm_rows) ** 0.5, (1.0 / args.dlrm_rows) ** 0.5)
        bottom = torch.nn.Sequential(mlp(13, 512, 256, args.dlrm_dim), torch.nn.ReLU())
        top = mlp(args.dlrm_dim + n * (n - 1) // 2, 1024, 1024, 512, 256, 1)
        pi, pj = torch.triu_indices(n, n, offset=1, device=device)
        model = torch.nn.ModuleList([tables, bottom, top])
        # No momentum or weight decay: no optimizer state, so the memory is the tables; the
        # per-tensor loop (foreach=False) is the path that applies sparse gradients.
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01, foreach=False)
        dense = torch.randn(args.batch, 13, device=device)
        shape = (args.dlrm_tables, args.batch, args.dlrm_bag)
        if args.dlrm_zipf == 0:
            indices = torch.randint(0, args.dlrm_rows, shape, device=device)
        else:  # a power law with hot rows first: the continuous law's inverse CDF on [1, rows + 1)
            u, a, m = torch.rand(shape, device=device, dtype=torch.float64), 1.0 - args.dlrm_zipf, args.dlrm_rows + 1.0
            x = torch.pow(m, u) if abs(a) < 1e-9 else torch.pow((m ** a - 1.0) * u + 1.0, 1.0 / a)
            indices = (x.floor().long() - 1).clamp_(0, args.dlrm_rows - 1)
        labels = torch.randint(0, 2, (args.batch,), device=device).float()
        loss_fn = torch.nn.BCEWithLogitsLoss()

        def step():
            optimizer.zero_grad(set_to_none=True)
            x = bottom(dense)
            f = torch.stack([x] + [t(indices[k]) for k, t in enumerate(tables)], dim=1)
            dots = torch.bmm(f, f.transpose(1, 2))[:, pi, pj]
            loss = loss_fn(top(torch.cat([x, dots], dim=1)).squeeze(1), labels)
            loss.backward()
            optimizer.step()
            return loss
        # A step touches the rows it looks up (weights and their sparse gradients), not the tables.
        touched = sum(torch.unique(indices[k]).numel() for k in range(args.dlrm_tables)) * args.dlrm_dim * 4 * 2
        return step, touched - args.dlrm_tables * args.dlrm_rows * args.dlrm_dim * 4

    if args.model == "bert_base":
        vocab, hidden = 30522, 768
        layer = torch.nn.TransformerEncoderLayer(hidden, 12, 3072, dropout=0.1, activation="gelu", batch_first=True)
        parts = torch.nn.ModuleDict({"tokens": torch.nn.Embedding(vocab, hidden),
                                     "positions": torch.nn.Embedding(max(512, args.seq_len), hidden),
                                     "norm": torch.nn.LayerNorm(hidden),
                                     "encoder": torch.nn.TransformerEncoder(layer, 12, enable_nested_tensor=False),
                                     "head": torch.nn.Linear(hidden, vocab)}).to(device)
        optimizer = torch.optim.AdamW(parts.parameters(), lr=1e-4)
        ids = torch.randint(0, vocab, (args.batch, args.seq_len), device=device)
        labels = torch.randint(0, vocab, (args.batch, args.seq_len), device=device)
        pos = torch.arange(args.seq_len, device=device)

        def step():
            optimizer.zero_grad(set_to_none=True)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                x = torch.nn.functional.dropout(parts["norm"](parts["tokens"](ids) + parts["positions"](pos)), 0.1)
                logits = parts["head"](parts["encoder"](x))
                loss = torch.nn.functional.cross_entropy(logits.reshape(-1, vocab), labels.reshape(-1))
            loss.backward()
            optimizer.step()
            return loss
        return step, 0

    import torchvision
    model = getattr(torchvision.models, args.model)(num_classes=1000).to(device).to(memory_format=torch.channels_last)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    images = torch.randn(args.batch, 3, 224, 224, device=device).to(memory_format=torch.channels_last)
    labels = torch.randint(0, 1000, (args.batch,), device=device)

    def step():
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(model(images), labels)
        loss.backward()
        optimizer.step()
        return loss
    return step, 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True,
                        choices=["resnet50", "shufflenet_v2_x1_0", "mobilenet_v2", "resnet18", "dlrm", "bert_base"])
    parser.add_argument("--batch", type=int, help="batch size (default 64; dlrm 2048, bert_base 32)")
    parser.add_argument("--window-s", type=float, default=2.0, help="seconds per reported window (2)")
    parser.add_argument("--report-memory-only", action="store_true", help="3 steps, print the memory, exit")
    parser.add_argument("--kernel-stats-steps", type=int, default=0, help="after SIGTERM, N profiled steps (0)")
    parser.add_argument("--seq-len", type=int, default=128, help="bert_base: sequence length")
    parser.add_argument("--dlrm-tables", type=int, default=8, help="dlrm: embedding tables")
    parser.add_argument("--dlrm-rows", type=int, default=2_000_000, help="dlrm: rows per table")
    parser.add_argument("--dlrm-dim", type=int, default=256, help="dlrm: embedding dimension")
    parser.add_argument("--dlrm-bag", type=int, default=32, help="dlrm: lookups per sample and table")
    parser.add_argument("--dlrm-zipf", type=float, default=0.0,
                        help="dlrm: 0 draws row ids uniformly; S > 0 from a power law of exponent S, hot rows first")
    args = parser.parse_args()
    if not 0.0 <= args.dlrm_zipf <= 10.0 or args.window_s <= 0:
        parser.error("need 0 <= --dlrm-zipf <= 10 and --window-s > 0")
    args.batch = args.batch or {"dlrm": 2048, "bert_base": 32}.get(args.model, 64)
    import torch
    # No cuDNN autotuning: a throttled job would spend minutes in it, and runs would differ.
    torch.backends.cudnn.benchmark = False
    step, hot_extra = build(args, torch, torch.device("cuda"))

    def memory() -> dict:
        peak = torch.cuda.max_memory_allocated()
        return {"model": args.model, "batch": args.batch, "peak_reserved_bytes": torch.cuda.max_memory_reserved(),
                "peak_allocated_bytes": peak, "hot_set_bytes": peak + hot_extra}

    if args.report_memory_only:
        for _ in range(3):
            step().item()
        emit({"event": "memory", **memory()})
        return 0
    flags = {"paused": False, "stop": False}
    signal.signal(signal.SIGUSR1, lambda *_: flags.update(paused=True))
    signal.signal(signal.SIGUSR2, lambda *_: flags.update(paused=False))
    signal.signal(signal.SIGTERM, lambda *_: flags.update(stop=True))
    windows = Windows(args.window_s)
    while not flags["stop"]:
        if flags["paused"]:
            time.sleep(0.01)
            continue
        step().item()  # the step's host sync
        windows.step_done()
    windows.stopped.set()
    if args.kernel_stats_steps > 0:
        try:  # a profile row without kernel stats says why
            from torch.profiler import ProfilerActivity, profile
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                t0 = time.time()
                for _ in range(args.kernel_stats_steps):
                    step().item()
                took = time.time() - t0
            emit(span_stats([(e.time_range.start, e.time_range.end) for e in prof.events()
                             if e.device_type == torch.autograd.DeviceType.CUDA], args.kernel_stats_steps, took))
        except Exception as e:  # noqa: BLE001
            emit({"event": "kernels", "error": repr(e)})
    emit({"event": "end", "t": time.time(), "iterations": windows.iterations, **memory()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
