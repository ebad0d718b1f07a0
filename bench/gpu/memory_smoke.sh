#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Quick check of the memory path on a real GPU: tgs-node with a tgs memory budget (20 GiB),
# an opportunistic ResNet-18 (batch 768) that arrives first and a production ResNet-50 (batch 128)
# 15 s later, under the interposer: the opportunistic job is evicted down to its limit while the
# production job allocates, and restored when it leaves. Prints tgs-node status every 2 s.
# Usage (GPU machine; see rate_control.sh for .deps/include): OUT=<dir> bench/gpu/memory_smoke.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/gpu-memory-smoke-out}
mkdir -p "$OUT"
repo=$PWD
BUILD=/tmp/tgs-gpu-build
work=$(mktemp -d)
. bench/gpu/build_backend.sh
build_backend
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv
socket=$work/node.sock
$node --socket $socket --memory-policy tgs --memory-budget-mib 20480 --production-window-ms 1000 --log-level info > $OUT/node.log 2>&1 &
np=$!
sleep 0.5
cat > $work/job.py <<'PY'
import sys, time, torch, torchvision
model_name, batch, secs = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
print("mem_get_info", torch.cuda.mem_get_info(), flush=True)
m = getattr(torchvision.models, model_name)().cuda()
opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
x = torch.randn(batch, 3, 224, 224, device="cuda"); y = torch.randint(0, 1000, (batch,), device="cuda")
t0 = time.time(); n = 0; last = t0
while time.time() - t0 < secs:
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = torch.nn.functional.cross_entropy(m(x), y)
    loss.backward(); opt.step(); loss.item(); n += 1
    if time.time() - last > 2:
        print(f"{model_name} t={time.time()-t0:.1f} it/s={n/(time.time()-t0):.2f} reserved={torch.cuda.memory_reserved()/2**30:.2f}GiB", flush=True); last = time.time()
print(model_name, "done", n / (time.time() - t0), "it/s; peak reserved", torch.cuda.max_memory_reserved() / 2**30, flush=True)
PY
export TGS_NODE_SOCKET=$socket TGS_LOG_LEVEL=info PYTHONUNBUFFERED=1
TGS_JOB_CLASS=opportunistic LD_PRELOAD=$BUILD/lib/libtgs-intercept.so python3 $work/job.py resnet18 768 50 > $OUT/opp.log 2>&1 &
op=$!
sleep 15
$node status --socket $socket
TGS_JOB_CLASS=production LD_PRELOAD=$BUILD/lib/libtgs-intercept.so python3 $work/job.py resnet50 128 25 > $OUT/prod.log 2>&1 &
pp=$!
for i in $(seq 12); do sleep 2; $node status --socket $socket | tail -n +2; done
wait $pp
for i in 1 2 3; do sleep 1; $node status --json --socket $socket | tail -n +2; done
wait $op
kill $np; wait $np
tail -5 $OUT/opp.log $OUT/prod.log
grep -v "^$" $OUT/node.log | tail -30
