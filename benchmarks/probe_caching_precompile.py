"""Does torch's Dynamo cache (``torch._dynamo.config.caching_precompile``, env TORCH_CACHING_PRECOMPILE=1) give
hybrid_trt a safe warm start without Dynamo re-tracing? Each step is a fresh process on one set of cache
directories:

1. ``save``: ResNet-18 compiled with hybrid_trt, first output, then ``torch.compiler.save_cache_artifacts()``
   (which writes the Dynamo cache entry under caching_precompile);
2. ``same``: the same model and weights again: is Dynamo's entry hit, how long to the first output, correct?
3. ``other weights``: the same class with other weights (a new checkpoint): is the entry hit, correct?
4. ``inductor``: the same model with ``backend="inductor"``: is hybrid_trt's entry served to it (do hybrid_trt
   engines run)?

    .venv/bin/python benchmarks/probe_caching_precompile.py [--model resnet18]

It prints one line per step. hybrid_trt does not use this mode (README, "Warm starts"): this shows why.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]

CHILD = r"""
import json, os, sys, time
import torch
assert torch._dynamo.config.caching_precompile  # from TORCH_CACHING_PRECOMPILE=1
sys.path.insert(0, sys.argv[1])
import hybrid_trt
from hybrid_trt.engines.runtime import PartitionRuntime
from examples.models import build
step, name = sys.argv[2], sys.argv[3]
torch.set_num_threads(2)
model, x = build(name)
if step == "other weights":
    torch.manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.05)
calls = []
original_run = PartitionRuntime.run
def counting_run(self, inputs, sizes):
    calls.append(self.key)
    return original_run(self, inputs, sizes)
PartitionRuntime.run = counting_run
backend = "inductor" if step == "inductor" else "hybrid_trt"
with torch.no_grad():
    expected = model(x)
    t0 = time.perf_counter()
    out = torch.compile(model, backend=backend)(x)
    seconds = time.perf_counter() - t0
if step == "save":
    torch.compiler.save_cache_artifacts()
from torch._dynamo.utils import counters
print("RESULT " + json.dumps({
    "step": step, "backend": backend, "seconds": seconds, "dynamo_cache": dict(counters["dynamo_cache"]),
    "hybrid_engine_calls": len(calls), "max_abs_diff": float((out - expected).abs().max()),
    "matches": bool(torch.allclose(out, expected, rtol=1e-3, atol=1e-3)), "load": os.getloadavg()[0]}))
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="resnet18")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="probe_precompile_") as tmp:
        env = dict(os.environ, TORCH_CACHING_PRECOMPILE="1", TORCHINDUCTOR_CACHE_DIR=f"{tmp}/inductor",
                   HYBRID_TRT_CACHE_DIR=f"{tmp}/hybrid", OMP_NUM_THREADS="2")
        for step in ("save", "same", "other weights", "inductor"):
            proc = subprocess.run([sys.executable, "-c", CHILD, str(ROOT), step, args.model], env=env,
                                  capture_output=True, text=True, timeout=1800)
            if proc.returncode != 0:
                raise RuntimeError(f"step {step} failed:\n{proc.stderr[-4000:]}")
            line = next(line for line in proc.stdout.splitlines() if line.startswith("RESULT "))
            r = json.loads(line[len("RESULT "):])
            print(f"{r['step']:>13} ({r['backend']}): {r['seconds']:.2f} s to first output, dynamo cache "
                  f"{r['dynamo_cache']}, hybrid_trt engine calls {r['hybrid_engine_calls']}, matches eager "
                  f"{r['matches']} (max |diff| {r['max_abs_diff']:.3g}), load {r['load']:.1f}", flush=True)


if __name__ == "__main__":
    main()
