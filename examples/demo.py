"""hybrid_trt demo: compile the example perception detector (its decode step splits the graph) and ResNet-18,
print the partition reports and a latency table against eager PyTorch and Inductor.

    .venv/bin/python examples/demo.py [--models detector,resnet18] [--iters 20]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import hybrid_trt  # noqa: E402
from examples.models import build  # noqa: E402


def _median_ms(fn, x, iters):
    for _ in range(3):
        fn(x)
    samples = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn(x)
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples) * 1e3


def _max_err(a, b):
    a = a if isinstance(a, tuple) else (a,)
    b = b if isinstance(b, tuple) else (b,)
    return max(float((x.double() - y.double()).abs().max()) for x, y in zip(a, b))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="detector,resnet18")
    ap.add_argument("--iters", type=int, default=20)
    args = ap.parse_args()
    rows = []
    with torch.no_grad():
        for name in args.models.split(","):
            model, x = build(name)
            ref = model(x)
            print(f"\n== {name}: compiling with hybrid_trt ...", flush=True)
            t0 = time.perf_counter()
            hybrid = torch.compile(model, backend="hybrid_trt")
            out = hybrid(x)
            hybrid_compile = time.perf_counter() - t0
            print(hybrid_trt.last_report().table())
            print(f"== {name}: compiling with Inductor (freezing) ...", flush=True)
            t0 = time.perf_counter()
            inductor = torch.compile(model, backend="inductor", options={"freezing": True})
            inductor(x)
            inductor_compile = time.perf_counter() - t0
            err = _max_err(out, ref)
            if err > 1e-3:
                raise SystemExit(f"{name}: hybrid_trt output differs from eager by {err:.2e}")
            times = {v: _median_ms(f, x, args.iters) for v, f in
                     (("eager", model), ("inductor", inductor), ("hybrid_trt", hybrid))}
            rows.append((name, times, hybrid_compile, inductor_compile, err))
    print(f"\nlatency (median of {args.iters}, {torch.get_num_threads()} threads)")
    print(f"{'model':<12} {'eager ms':>9} {'inductor ms':>12} {'hybrid ms':>10} {'vs eager':>9} {'vs inductor':>12} "
          f"{'compile s (hybrid/inductor)':>28} {'max err':>8}")
    for name, t, hc, ic, err in rows:
        print(f"{name:<12} {t['eager']:>9.2f} {t['inductor']:>12.2f} {t['hybrid_trt']:>10.2f} "
              f"{t['hybrid_trt'] / t['eager']:>9.2f} {t['hybrid_trt'] / t['inductor']:>12.2f} "
              f"{hc:>13.1f} / {ic:<13.1f} {err:>8.1e}")


if __name__ == "__main__":
    main()
