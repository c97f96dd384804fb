"""Where the time of one sparse-conv layer goes (GPU machine).

For each case in bench_sparse.py's layer set, ours and spconv-triton's:
the torch.profiler table of one layer call (rulebook rebuilt), sorted by
device time, plus the host time of a call (dispatch only, measured without
synchronising) next to its CUDA-event time. With ``--e2e``, the same for
examples/lidar_detector.py (realistic, fp16) in eager mode, with Inductor
and with hybrid_trt (ONNX Runtime's kernels show up in the CUDA columns).
Use it to decide what to optimise; bench_sparse.py is the benchmark of record.

    python benchmarks/profile_sparse.py [--e2e] > profile.txt
"""

from __future__ import annotations

import sys
import time

import torch

import bench_sparse as bs
from hybrid_trt.plugins.sparse import SparseConv3d, SparseConvTensor, SubMConv3d


def host_ms(fn, iters: int = 30) -> float:
    """Median host time of a call: the GPU queue is kept non-empty, so this is
    dispatch cost, except where the call synchronises (e.g. unique, nonzero)."""
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    torch.cuda.synchronize()
    return sorted(times)[len(times) // 2]


def profile(label: str, fn, sort_by: tuple = ("cuda_time_total",)) -> None:
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=acts) as prof:
        for _ in range(10):
            fn()
        torch.cuda.synchronize()
    print(f"\n===== {label}: event {bs.cuda_time_ms(fn):.3f} ms, host {host_ms(fn):.3f} ms (per call) =====")
    for key in sort_by:
        print(prof.key_averages().table(sort_by=key, row_limit=25, max_name_column_width=70))


def end_to_end() -> None:
    import hybrid_trt

    model = bs.lidar_detector.build_model("realistic").to("cuda", torch.float16).eval()
    feats, coords = bs.lidar_detector.make_inputs("realistic", "cuda", torch.float16, seed=0)
    torch._dynamo.config.capture_dynamic_output_shape_ops = True
    with torch.inference_mode():
        for mode in ("eager", "inductor", "hybrid_trt"):
            torch._dynamo.reset()
            fn = model if mode == "eager" else torch.compile(model, backend=mode, fullgraph=True)
            fn(feats, coords)
            if mode == "hybrid_trt":
                print(hybrid_trt.last_report().table())
            profile(f"e2e {mode}", lambda: fn(feats, coords), ("cuda_time_total", "cpu_time_total"))


def main() -> int:
    if "--e2e" in sys.argv:
        end_to_end()
        return 0
    spt = bs.spt
    cases = []
    for c in (64, 128):
        cases.append((f"SubM C={c}", c, lambda c=c: SubMConv3d(c, c, 3, bias=False),
                      lambda c=c: spt.SubMConv3d(c, c, 3, bias=False)))
    cases.append(("strided s2 C=64", 64, lambda: SparseConv3d(64, 64, 3, stride=2, padding=1, bias=False),
                  lambda: spt.SparseConv3d(64, 64, 3, stride=2, padding=1, bias=False)))
    with torch.no_grad():
        for label, c, make_ours, make_theirs in cases:
            feats, coords, grid = bs.make_cloud(50000, c, torch.float16)
            ours = make_ours().to("cuda", torch.float16).eval()
            profile(f"ours {label}", lambda: ours(SparseConvTensor(feats, coords, grid, 1)))
            if spt is not None:
                theirs = make_theirs().to("cuda", torch.float16).eval()
                profile(f"spconv-triton {label}",
                        lambda: theirs(spt.SparseConvTensor(feats, coords, list(grid), 1)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
