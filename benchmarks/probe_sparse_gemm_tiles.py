"""Probe: every GEMM tile of the sparse conv against spconv 2.x's cached conv, float32 (FMA) SubM layers.

For each case, the rulebook is built once; then each tile config of ``_implicit_gemm_kernel`` (launched
directly, fixed config) and spconv's conv on its stored pairs are timed in the same interleaved rounds
(bench_sparse.interleaved_ms, 60 rounds). Prints one table per case: ms per call and ratio to spconv.
Usage: python benchmarks/probe_sparse_gemm_tiles.py [--voxels 50000,150000] [--channels 64,128]
"""
from __future__ import annotations

import argparse
import pathlib
import sys

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import bench_sparse as B  # noqa: E402
from hybrid_trt.plugins.sparse import SparseConvTensor, SubMConv3d  # noqa: E402
from hybrid_trt.plugins.sparse import triton_gemm as G  # noqa: E402

TILES = [  # BLOCK_M, BLOCK_N, BLOCK_K, warps, stages, preload
    (128, 64, 32, 4, 3, False), (64, 64, 32, 4, 3, False), (64, 64, 64, 4, 3, False),
    (128, 128, 32, 8, 3, False), (64, 128, 64, 4, 3, False), (128, 64, 64, 4, 2, False),
    (32, 64, 32, 2, 3, False), (128, 128, 64, 8, 3, False), (256, 64, 32, 8, 3, False),
    (64, 64, 16, 4, 2, False), (128, 64, 16, 8, 2, False), (128, 128, 16, 8, 2, False),
    (64, 64, 32, 4, 3, True), (128, 64, 32, 4, 3, True), (128, 64, 64, 8, 3, True), (64, 128, 64, 4, 3, True),
    (64, 128, 16, 4, 2, False), (64, 128, 32, 8, 2, False), (128, 32, 32, 4, 3, False), (64, 32, 32, 2, 3, False),
]


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--voxels", default="50000")
    p.add_argument("--channels", default="128,64")
    args = p.parse_args()
    dtype = torch.float32
    for n in [int(v) for v in args.voxels.split(",")]:
        for c in [int(v) for v in args.channels.split(",")]:
            feats, coords, grid = B.make_cloud(n, c, dtype, 0)
            ours = SubMConv3d(c, c, 3, bias=False, indice_key="k").to("cuda", dtype).eval()
            fns = {}
            with torch.no_grad():
                y = ours(SparseConvTensor(feats, coords, grid, 1))
                rb = y.indice_dict["k"]
                w = G.weight_kcc(ours.weight)
                out = torch.empty((rb.nbr.shape[0], c), device="cuda", dtype=dtype)
                m = rb.nbr.shape[0]
                for bm, bn, bk, nw, ns, pre in TILES:
                    bn = min(bn, c)
                    grid_ = (-(-m // bm), -(-c // bn))

                    def fn(bm=bm, bn=bn, bk=bk, nw=nw, ns=ns, pre=pre, grid_=grid_):
                        G._implicit_gemm_kernel[grid_](
                            feats, w, rb.nbr, rb.order, w, m, out, CIN=c, COUT=c, K=27, HAS_ORDER=True,
                            HAS_BIAS=False, PRECISION="ieee", W_KCC=True, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk,
                            PRELOAD_NBR=pre, KP=32, num_warps=nw, num_stages=ns)
                    fns[f"{bm}x{bn}x{bk} w{nw} s{ns}{' pre' if pre else ''}"] = fn
                fns["ours (autotuned op)"] = lambda: ours._compute(feats, rb)
                ours._compute(feats, rb)
                key = next(k for k in G._LAUNCH_KWARGS if k[0] == c and k[1] == c and k[3] == dtype)
                chosen = G._LAUNCH_KWARGS[key]
                print(f"autotuned for C={c} N={n}: " + ", ".join(
                    f"{k}={chosen[k]}" for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "num_warps", "num_stages",
                                                 "PRELOAD_NBR") if k in chosen))
                fixed = dict(chosen, BLOCK_M=64, BLOCK_N=min(64, c), BLOCK_K=32, num_warps=4, num_stages=3,
                             PRELOAD_NBR=True)
                tuned_key = key

                def op_fixed(key=tuned_key, fixed=fixed, chosen=chosen):
                    G._LAUNCH_KWARGS[key] = fixed
                    try:
                        return ours._compute(feats, rb)
                    finally:
                        G._LAUNCH_KWARGS[key] = chosen
                fns["ours op, tile 64x64x32 w4 s3 pre"] = op_fixed
                if B.spc is not None:
                    theirs = B.twin.twin_conv(ours, B.spc)
                    yt = theirs(B.spc.SparseConvTensor(feats, coords, list(grid), 1))
                    fns["spconv cached"] = B._cached_call("spconv", theirs, yt, feats, coords, True)
                ref = ours._compute(feats, rb)
                bad = []
                for label, fn in fns.items():
                    if label.startswith("spconv"):
                        continue
                    out.zero_()
                    got = fn()
                    got = out if got is None else got
                    if not torch.allclose(got, ref, rtol=1e-4, atol=1e-4):
                        bad.append(label)
                ms, errors = B.interleaved_ms(fns, warmup=3, iters=60)
            base = ms.get("spconv cached")
            print(f"\n## SubM C={c} fp32 N={n} (M={m}); wrong results: {bad or 'none'}; errors: {errors or 'none'}")
            print("| tile | ms | / spconv |\n|---|---|---|")
            for label, v in sorted(ms.items(), key=lambda kv: kv[1]):
                print(f"| {label} | {v:.3f} | {v / base:.2f} |" if base else f"| {label} | {v:.3f} | - |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
