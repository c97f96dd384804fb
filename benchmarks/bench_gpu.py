"""GPU run (one H200 here): hybrid_trt with ONNX Runtime's CUDA execution provider against eager and Inductor.

    python benchmarks/bench_gpu.py [--out FILE]

Checks every example model's output against eager on CUDA, then times eager, Inductor and hybrid_trt (median
of CUDA-synchronised calls, interleaved rounds). TensorRT is not installed there, so the delegate is ONNX
Runtime (CUDA EP, IO binding on device pointers, PyTorch's stream).
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


def _err(name, a, b):
    """Max abs error over the outputs. For the detector, top-k may order near-equal peaks differently when
    convolutions round differently, so its scores are compared sorted, and boxes/classes are not compared."""
    a = a if isinstance(a, tuple) else (a,)
    b = b if isinstance(b, tuple) else (b,)
    if name == "detector":
        a, b = (a[1].sort(-1).values,), (b[1].sort(-1).values,)
    return max(float((x.double() - y.double()).abs().max()) for x, y in zip(a, b))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iters", type=int, default=20)
    args = ap.parse_args()
    import onnxruntime as ort
    dev = torch.device("cuda")
    # Full fp32 everywhere, so differences measure the delegate, not TF32 rounding in eager.
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    lines = [f"Machine: {torch.cuda.get_device_name()}, torch {torch.__version__}, onnxruntime {ort.__version__} "
             f"(providers {ort.get_available_providers()})", "",
             "| model | eager ms | Inductor ms | hybrid ms | hybrid/eager | hybrid/Inductor | partitions | "
             "delegated ops | max abs err |", "|---|---|---|---|---|---|---|---|---|"]
    with torch.no_grad():
        for name in ("resnet18", "detector", "transformer"):
            model, x = build(name)
            model, x = model.to(dev), x.to(dev)
            ref = model(x)
            torch._dynamo.reset()
            hybrid = torch.compile(model, backend="hybrid_trt")
            out = hybrid(x)
            rep = hybrid_trt.last_report()
            print(rep.table(), flush=True)
            err = _err(name, out, ref)
            inductor = torch.compile(model, backend="inductor")
            inductor(x)
            fns = {"eager": model, "inductor": inductor, "hybrid": hybrid}
            times = {k: [] for k in fns}
            for f in fns.values():
                for _ in range(5):
                    f(x)
            torch.cuda.synchronize()
            for _ in range(args.rounds):
                for k, f in fns.items():
                    for _ in range(args.iters):
                        t0 = time.perf_counter()
                        f(x)
                        torch.cuda.synchronize()
                        times[k].append(time.perf_counter() - t0)
            m = {k: statistics.median(v) * 1e3 for k, v in times.items()}
            lines.append(f"| {name} | {m['eager']:.3f} | {m['inductor']:.3f} | {m['hybrid']:.3f} | "
                         f"{m['hybrid'] / m['eager']:.2f} | {m['hybrid'] / m['inductor']:.2f} | "
                         f"{sum(p.status == 'delegated' for p in rep.partitions)} | {rep.delegated_op_count} | "
                         f"{err:.1e} |")
            if err > 1e-2:
                lines.append(f"**{name}: output differs from eager by {err:.2e}**")
    text = "\n".join(lines)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
