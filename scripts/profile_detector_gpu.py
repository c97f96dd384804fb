"""Where a many-graph model's time goes on CUDA: hybrid_trt (default options, i.e. measured placement on a GPU,
and ``placement="delegate"``) against plain Inductor and eager, by torch.profiler.

    python scripts/profile_detector_gpu.py --model tv_fcos_resnet50_fpn --dtype float16

Prints, per variant: the median wall time per call (interleaved rounds), then the profiler's top rows by self
CPU time and by device time over a few calls, and for hybrid_trt the partition reports.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def _wall_ms(fn, inputs, rounds: int) -> list:
    """Wall time per call (ms), synchronised before and after each."""
    import torch
    times = []
    for _ in range(rounds):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn(*inputs)
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    return times


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="tv_fcos_resnet50_fpn")
    ap.add_argument("--dtype", default="float16")
    ap.add_argument("--rounds", type=int, default=11)
    ap.add_argument("--rows", type=int, default=22)
    args = ap.parse_args()
    import torch
    import hybrid_trt
    from benchmarks.conformance import CASES_BY_NAME, build
    from torch.profiler import ProfilerActivity, profile
    dtype = getattr(torch, args.dtype)
    torch.manual_seed(0)
    model, inputs = build(CASES_BY_NAME[args.model])
    model = model.cuda().to(dtype)
    inputs = tuple([t.cuda().to(dtype) for t in a] if isinstance(a, list) else a.cuda().to(dtype) for a in inputs)
    variants = {"eager": None, "inductor": ("inductor", None), "hybrid": ("hybrid_trt", {}),
                "hybrid_delegate": ("hybrid_trt", {"placement": "delegate"})}
    fns, reports = {}, {}
    with torch.no_grad():
        for name, spec in variants.items():
            if spec is None:
                fns[name] = model
                continue
            torch._dynamo.reset()
            before = len(hybrid_trt.reports())
            fn = torch.compile(model, backend=spec[0], options=spec[1])
            t0 = time.perf_counter()
            fn(*inputs)
            fn(*inputs)
            torch.cuda.synchronize()
            print(f"{name}: compiled in {time.perf_counter() - t0:.1f} s", flush=True)
            fns[name] = fn
            reports[name] = hybrid_trt.reports()[before:]
            # Dynamo's cache is per code object: a reset would drop the compiled frames of the earlier variants,
            # so each variant is timed and profiled right after its compile, then kept by reference only.
            times = _wall_ms(fn, inputs, args.rounds)
            print(f"== {name}: median {statistics.median(times):.3f} ms per call (min {min(times):.3f})", flush=True)
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                for _ in range(3):
                    fn(*inputs)
                torch.cuda.synchronize()
            ka = prof.key_averages()
            print(ka.table(sort_by="self_cpu_time_total", row_limit=args.rows, max_name_column_width=70), flush=True)
            print(ka.table(sort_by="self_device_time_total", row_limit=args.rows, max_name_column_width=70),
                  flush=True)
            for r in reports.get(name, []):
                print(r.table(), flush=True)
        times = _wall_ms(model, inputs, args.rounds)
        print(f"== eager: median {statistics.median(times):.3f} ms per call", flush=True)


if __name__ == "__main__":
    main()
