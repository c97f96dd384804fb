"""What ONNX Runtime's end-of-run synchronisation costs a whole model on CUDA (GPU machine only).

Every uncaptured CUDA engine run ends with ONNX Runtime's host synchronisation, which is also where the provider
releases the pinned staging buffers of Concat/Resize/TopK kernels (README, "ONNX Runtime partitions run in the
model's dtypes"); engines keep it on one run in ``OnnxRuntimeEngine.sync_every``. This probe compiles a model
once, then times the same compiled callable with the synchronisation on one run in K (K in --every; 1 = every
run), in interleaved rounds within one process, and records the process's resident memory across many calls in
each mode (pinned buffers left unreleased would grow it).

    python scripts/ort_sync_probe.py --models tv_fcos_resnet50_fpn,tv_maskrcnn_resnet50_fpn --dtype float16
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _sync_every(every: int) -> None:
    """Engines keep ONNX Runtime's end-of-run synchronisation on one run in ``every`` (1: on every run, the
    behaviour before the periodic synchronisation)."""
    from hybrid_trt.delegates.onnxruntime_delegate import OnnxRuntimeEngine
    OnnxRuntimeEngine.sync_every = every


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="tv_fcos_resnet50_fpn,tv_maskrcnn_resnet50_fpn")
    ap.add_argument("--dtype", default="float16")
    ap.add_argument("--every", default="1,16,1000000")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--calls", type=int, default=10)
    ap.add_argument("--leak-calls", type=int, default=300)
    ap.add_argument("--options", default="", help="hybrid_trt options, k=v comma-separated (e.g. placement=delegate)")
    args = ap.parse_args()

    import torch
    import hybrid_trt  # noqa: F401  (registers the backend)
    from benchmarks.conformance import CASES_BY_NAME, build, compare
    dtype = getattr(torch, args.dtype)
    opts = dict(kv.split("=", 1) for kv in args.options.split(",") if kv)
    everies = [int(e) for e in args.every.split(",")]
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, options {opts}", flush=True)
    for name in args.models.split(","):
        torch.manual_seed(0)
        model, inputs = build(CASES_BY_NAME[name])
        model = model.cuda().to(dtype)
        inputs = tuple([t.cuda().to(dtype) for t in a] if isinstance(a, list) else a.cuda().to(dtype) for a in inputs)
        with torch.no_grad():
            ref = model(*inputs)
            ind = torch.compile(model, backend="inductor")
            ind(*inputs)
            torch._dynamo.reset()
            hyb = torch.compile(model, backend="hybrid_trt", options=opts)
            t0 = time.perf_counter()
            out = hyb(*inputs)
            torch.cuda.synchronize()
            print(f"{name}: hybrid compiled in {time.perf_counter() - t0:.1f} s; "
                  f"{len(hybrid_trt.reports())} graph report(s)", flush=True)
            fns = {"eager": model, "inductor": ind}
            for e in everies:
                _sync_every(e)
                res = compare(hyb(*inputs), ref, 2e-2 if dtype == torch.float16 else 1e-3)
                print(f"  every={e}: vs eager {res}", flush=True)
                fns[f"hybrid sync every {e}"] = (e, hyb)
            times = {k: [] for k in fns}
            for _ in range(args.rounds):
                for k, f in fns.items():
                    if isinstance(f, tuple):
                        _sync_every(f[0])
                        f = f[1]
                    f(*inputs)
                    torch.cuda.synchronize()
                    t0 = time.perf_counter()
                    for _ in range(args.calls):
                        f(*inputs)
                    torch.cuda.synchronize()
                    times[k].append((time.perf_counter() - t0) / args.calls * 1e3)
            base = statistics.median(times["eager"])
            ind_ms = statistics.median(times["inductor"])
            for k, v in times.items():
                m = statistics.median(v)
                print(f"  {k:>24}: {m:8.3f} ms  ({m / base:.2f}x eager, {m / ind_ms:.2f}x Inductor)", flush=True)
            for e in everies:
                _sync_every(e)
                r0 = _rss_mb()
                for i in range(args.leak_calls):
                    hyb(*inputs)
                torch.cuda.synchronize()
                r1 = _rss_mb()
                for i in range(args.leak_calls):
                    hyb(*inputs)
                torch.cuda.synchronize()
                r2 = _rss_mb()
                print(f"  every={e}: RSS {r0:.0f} -> {r1:.0f} -> {r2:.0f} MB over 2x{args.leak_calls} calls",
                      flush=True)
        torch._dynamo.reset()


if __name__ == "__main__":
    main()
