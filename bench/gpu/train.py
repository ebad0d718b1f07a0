# SPDX-License-Identifier: Apache-2.0
"""A torchvision training loop on synthetic data that reports its throughput in fixed windows.

Used by rate_control.sh: every process of one measurement gets the same --start-at (a Unix
time), trains until then to warm up, then counts iterations in --windows windows of --window-s
seconds and prints one JSON line with the rate of each window.
"""
import argparse
import json
import os
import sys
import time

import torch
import torchvision


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", required=True,
                        choices=["resnet50", "shufflenet_v2_x1_0", "mobilenet_v2", "resnet18"])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--start-at", type=float, required=True, help="Unix time the first window starts")
    parser.add_argument("--windows", type=int, default=3)
    parser.add_argument("--window-s", type=float, default=8.0)
    parser.add_argument("--label", default="")
    parser.add_argument("--timeline-s", type=float, default=0.0,
                        help="Instead of windows: train this many seconds from --start-at and "
                             "print iterations completed in each second (for convergence times)")
    parser.add_argument("--pause-at", type=float, default=-1.0,
                        help="With --timeline-s: seconds after --start-at at which to stop "
                             "launching work (the job idles, as between epochs)")
    parser.add_argument("--pause-s", type=float, default=0.0, help="Length of that pause")
    args = parser.parse_args()

    # No cuDNN autotuning: a throttled opportunistic job would spend minutes autotuning, and the
    # chosen kernels would differ between runs of one measurement.
    torch.backends.cudnn.benchmark = False
    device = torch.device("cuda")
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

    if args.timeline_s > 0:
        # Per-second progress on the shared clock, from the job's first step (it may arrive
        # before or after --start-at; seconds are relative to --start-at).
        counts = {}
        loop_start = time.time() - args.start_at
        end = args.start_at + args.timeline_s
        paused = False
        while time.time() < end:
            now = time.time() - args.start_at
            if args.pause_at >= 0 and args.pause_at <= now < args.pause_at + args.pause_s:
                paused = True
                time.sleep(0.01)
                continue
            step()
            second = int(time.time() - args.start_at)
            counts[second] = counts.get(second, 0) + 1
        first = min(counts) if counts else 0
        timeline = [counts.get(t, 0) for t in range(first, int(args.timeline_s))]
        print(json.dumps({"label": args.label, "model": args.model, "batch": args.batch,
                          "first_second": first, "loop_start_s": loop_start, "paused": paused, "per_second": timeline}),
              flush=True)
        return 0

    # Warm up until the shared start, then count iterations in windows on the shared clock, so
    # the jobs of one measurement are measured over the same seconds. A job that is not ready
    # (still loading, or held by a rate controller) makes no progress in a window: that is its
    # throughput there, not an error.
    while time.time() < args.start_at:
        step()
    ready = time.time()
    rates = []
    for w in range(args.windows):
        begin = args.start_at + w * args.window_s
        end = begin + args.window_s
        count = 0
        while time.time() < end:
            step()
            if time.time() >= begin:
                count += 1
        rates.append(count / args.window_s)
    if ready - args.start_at > 1.0:
        print(f"{args.label}: ready {ready - args.start_at:.1f} s after the shared start",
              file=sys.stderr)
    print(json.dumps({"label": args.label, "model": args.model, "batch": args.batch, "pid": os.getpid(),
                      "ready_late_s": max(0.0, ready - args.start_at), "it_per_s": rates,
                      "reserved_bytes": torch.cuda.memory_reserved()}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
