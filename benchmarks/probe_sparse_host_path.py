"""Probe: host time per call of each layer of the sparse conv's cached path on CUDA (no sync inside the timed
loop, a sync every 20 calls so the queue never fills), and a cProfile of the op-level call.
Usage: python benchmarks/probe_sparse_host_path.py"""
from __future__ import annotations

import cProfile
import pathlib
import pstats
import sys
import time

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import bench_sparse as B  # noqa: E402
from hybrid_trt.plugins.sparse import SparseConvTensor, SubMConv3d, ops  # noqa: E402
from hybrid_trt.plugins.sparse import triton_gemm as G  # noqa: E402


def host_us(fn, n=400) -> float:
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    total = 0.0
    for i in range(n):
        t0 = time.perf_counter()
        fn()
        total += time.perf_counter() - t0
        if i % 20 == 19:
            torch.cuda.synchronize()
    return total / n * 1e6


def main() -> int:
    for dtype in (torch.float32, torch.float16):
        c, n = 64, 50000
        feats, coords, grid = B.make_cloud(n, c, dtype, 0)
        conv = SubMConv3d(c, c, 3, bias=False, indice_key="k").to("cuda", dtype).eval()
        with torch.no_grad():
            rb = conv(SparseConvTensor(feats, coords, grid, 1)).indice_dict["k"]
            w = conv.weight
            kcc = G.weight_kcc(w)
            out = torch.empty((rb.nbr.shape[0], c), device="cuda", dtype=dtype)
            key = next(k for k in G._LAUNCH_KWARGS if k[0] == c and k[3] == dtype)
            kw = G._LAUNCH_KWARGS[key]
            grid_ = (-(-rb.nbr.shape[0] // kw["BLOCK_M"]), -(-c // kw["BLOCK_N"]))
            m = rb.nbr.shape[0]
            rows = {
                "module _compute (op via torch.ops)": lambda: conv._compute(feats, rb),
                "ops.sparse_conv_compute": lambda: ops.sparse_conv_compute(feats, w, rb.nbr, None, rb.order),
                "ops._compute_cuda (no dispatcher)": lambda: ops._compute_cuda(feats, w, rb.nbr, None, rb.order),
                "triton_gemm.conv_compute": lambda: G.conv_compute(feats, w, rb.nbr, None, rb.order),
                "triton_gemm._launch (weight ready)": lambda: G._launch(feats, kcc if dtype == torch.float32 else w,
                                                                       rb.nbr, None, out, rb.order, False,
                                                                       dtype == torch.float32),
                "kernel[grid](...) alone": lambda: G._implicit_gemm_kernel[grid_](
                    feats, kcc if dtype == torch.float32 else w, rb.nbr, rb.order, w, m, out, **kw),
                "weight_kcc": lambda: G.weight_kcc(w),
                "torch.empty": lambda: torch.empty((m, c), dtype=dtype, device="cuda"),
                "tensor.contiguous() (already)": lambda: feats.contiguous(),
                "weight.to(same dtype)": lambda: w.to(dtype),
            }
            print(f"\n## host us per call, SubM C={c} N={n} {dtype}")
            for label, fn in rows.items():
                print(f"| {label} | {host_us(fn):.1f} |")
            prof = cProfile.Profile()
            prof.enable()
            for _ in range(300):
                conv._compute(feats, rb)
            prof.disable()
            torch.cuda.synchronize()
            pstats.Stats(prof).sort_stats("tottime").print_stats(14)
    return 0


if __name__ == "__main__":
    sys.exit(main())
