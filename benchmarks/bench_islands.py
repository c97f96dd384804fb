"""Models whose convolutions no delegate takes (float64 on the CPU: ONNX Runtime's CPU provider has no float64
Conv), so what a delegate could take are the batch norms, activations and pools between them. hybrid_trt hands
such islands back to Inductor (partitioner/partition.py, ``_FUSED_BY_INDUCTOR``); this times that rule against
the same compile with the islands delegated (the rule's op set emptied for that compile), Inductor and eager, in
one process, interleaved rounds.

    python benchmarks/bench_islands.py [--models resnet18,resnet50,mobilenet_v3_large] [--rounds 15] [--out FILE]

Batch 1, 3x112x112, random weights (torchvision), float64, torch.no_grad(). Each round runs every variant
``--iters`` times, in an order shuffled every round; a figure is the median over rounds of the median of those
calls; a ratio is the median of per-round ratios.
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import os
import platform
import random
import statistics
import subprocess
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import hybrid_trt  # noqa: E402
from hybrid_trt.partitioner import partition  # noqa: E402


@contextlib.contextmanager
def islands_delegated():
    kept = partition._FUSED_BY_INDUCTOR
    partition._FUSED_BY_INDUCTOR = frozenset()
    try:
        yield
    finally:
        partition._FUSED_BY_INDUCTOR = kept


def delegated(report) -> str:
    parts = [p for p in report.partitions if p.runs_delegated]
    return f"{len(parts)} ({report.delegated_op_count}/{report.total_op_count} ops)"


def main() -> None:
    import torchvision
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="resnet18,resnet50,mobilenet_v3_large")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--out")
    args = ap.parse_args()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip()
    lines = [f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} logical cores, Python "
             f"{platform.python_version()}, torch {torch.__version__}; commit {commit}; "
             f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {args.rounds} rounds of {args.iters} calls",
             "", "| model | partitions (rule) | partitions (islands delegated) | eager ms | Inductor ms | hybrid ms | "
             "hybrid, islands delegated ms | hybrid / Inductor | islands delegated / Inductor | hybrid / eager | "
             "max abs err (hybrid, islands) |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for name in args.models.split(","):
        torch._dynamo.reset()
        model = getattr(torchvision.models, name)(weights=None).eval().double()
        x = torch.randn(1, 3, 112, 112, dtype=torch.float64)
        with torch.no_grad():
            expected = model(x)
            fns = {"eager": model,
                   "inductor": torch.compile(copy.deepcopy(model), backend="inductor"),
                   "hybrid": torch.compile(copy.deepcopy(model), backend="hybrid_trt", options={"cache": False})}
            fns["inductor"](x)
            err = [float((fns["hybrid"](x) - expected).abs().max())]
            rule = delegated(hybrid_trt.last_report())
            fns["islands"] = torch.compile(copy.deepcopy(model), backend="hybrid_trt", options={"cache": False})
            with islands_delegated():
                err.append(float((fns["islands"](x) - expected).abs().max()))
            islands = delegated(hybrid_trt.last_report())
            times = {k: [] for k in fns}
            order = list(fns)
            for _ in range(args.rounds):
                random.shuffle(order)  # no variant always follows the same one (thread pools left spinning)
                for k in order:
                    f = fns[k]
                    calls = []
                    for _ in range(args.iters):
                        t0 = time.perf_counter()
                        f(x)
                        calls.append(time.perf_counter() - t0)
                    times[k].append(statistics.median(calls) * 1e3)

        def ratio(a, b):
            return statistics.median(p / q for p, q in zip(times[a], times[b]))
        med = {k: statistics.median(v) for k, v in times.items()}
        lines.append(f"| {name} | {rule} | {islands} | {med['eager']:.2f} | {med['inductor']:.2f} | "
                     f"{med['hybrid']:.2f} | {med['islands']:.2f} | {ratio('hybrid', 'inductor'):.3f} | "
                     f"{ratio('islands', 'inductor'):.3f} | {ratio('hybrid', 'eager'):.3f} | "
                     f"{err[0]:.1e}, {err[1]:.1e} |")
        print(lines[-1], flush=True)
    text = "\n".join(lines)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
