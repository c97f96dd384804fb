"""Probe: host and event time per call of the SubM rulebook's steps on CUDA, and of candidate replacements for its
row-schedule sort (a stable argsort of the mask keys, then a cast to int32). Interleaved rounds
(bench_sparse.interleaved_ms) for event times; host time as in probe_sparse_host_path.py.
Usage: python benchmarks/probe_subm_order.py [--one-cta]   (--one-cta: also a one-CTA tl.sort of <= 16384 rows)"""
from __future__ import annotations

import pathlib
import sys
import time

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "examples"))
import bench_sparse as B  # noqa: E402
import lidar_detector  # noqa: E402
from hybrid_trt.plugins.sparse import ops  # noqa: E402
from hybrid_trt.plugins.sparse import triton_rulebook as T  # noqa: E402

GRID, KS, DIL = (41, 1600, 1408), (3, 3, 3), (1, 1, 1)


@triton.jit
def _one_cta_sort_kernel(key_ptr, order_ptr, N, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    k = tl.load(key_ptr + offs, mask=offs < N, other=2**31 - 1).to(tl.int64)
    s = tl.sort((k << 32) | offs.to(tl.int64))
    tl.store(order_ptr + offs, (s & 0xFFFFFFFF).to(tl.int32), mask=offs < N)


def one_cta_sort(key, warps):
    n = key.shape[0]
    out = torch.empty((n,), dtype=torch.int32, device=key.device)
    _one_cta_sort_kernel[(1,)](key, out, n, BLOCK=triton.next_power_of_2(n), num_warps=warps)
    return out


def host_us(fn, n=300) -> float:
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    samples = []
    for i in range(n):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
        if i % 20 == 19:
            torch.cuda.synchronize()
    samples.sort()
    return samples[len(samples) // 2] * 1e6


def main() -> int:
    print(torch.__version__, triton.__version__, torch.cuda.get_device_name())
    for n in (10000, 50000, 150000):
        cfg = lidar_detector.DetectorConfig(grid=GRID, voxels_per_sample=n, batch_size=1)
        _, coords = lidar_detector.make_inputs(cfg, "cuda", torch.float16, seed=0)
        N = coords.shape[0]
        shape = tuple(GRID)
        nbr, order = T.subm_rulebook(coords, shape, KS, DIL)
        key = torch.empty((N,), dtype=torch.int32, device="cuda")
        table = T._hash_table(coords, shape)
        pad = T._subm_padding(KS, DIL)
        T._search(coords, table, nbr, shape, KS, (1, 1, 1), pad, DIL, mask_key=key)
        ref = torch.argsort(key, stable=True).to(torch.int32)
        assert torch.equal(ref, order)
        fns = {
            "subm_rulebook (launcher)": lambda: T.subm_rulebook(coords, shape, KS, DIL),
            "torch.ops subm_ordered": lambda: ops.sparse_rulebook_subm_ordered(coords, list(GRID), list(KS), list(DIL)),
            "hash table": lambda: T._hash_table(coords, shape),
            "torch.full (table)": lambda: torch.full((table[0].shape[0],), -1, dtype=torch.int64, device="cuda"),
            "search + mask keys": lambda: T._search(coords, table, nbr, shape, KS, (1, 1, 1), pad, DIL, mask_key=key),
            "argsort(stable).to(int32)": lambda: torch.argsort(key, stable=True).to(torch.int32),
            "argsort(stable)": lambda: torch.argsort(key, stable=True),
            "sort(stable)[1]": lambda: torch.sort(key, stable=True)[1],
            "sort int64 packed": lambda: torch.sort((key.to(torch.int64) << 32) | torch.arange(N, device="cuda"))[0],
        }
        if N <= 16384 and "--one-cta" in sys.argv:  # GPU-heavy (0.45 ms at 10k): off by default
            for w in (8, 16, 32):
                try:
                    got = one_cta_sort(key, w)
                    print(f"N={N} one-CTA sort warps={w} equal={torch.equal(got, ref)}")
                    fns[f"one-CTA tl.sort warps={w}"] = lambda w=w: one_cta_sort(key, w)
                except Exception as e:  # noqa: BLE001 - probe: report and go on
                    print(f"N={N} one-CTA sort warps={w} failed: {type(e).__name__}: {str(e)[:200]}")
        search_args = (coords, table[0], table[1], nbr, key, N, table[2], table[3], *shape, 1, 1, 1, *pad, *DIL)
        kp, block_m, kind = T._row_tiles(27)
        cexpr = dict(KY=3, KX=3, K=27, KP=kp, MASK_KEY=kind, BLOCK_M=block_m)
        g = T._grid(N, block_m)
        try:
            ck = T._hash_search_kernel[g](*search_args, **cexpr)
            print("returned", type(ck).__name__)
            ck._init_handles()
            stream = torch.cuda.current_stream().cuda_stream
            bound = (*search_args, *cexpr.values())
            ck.run(g[0], 1, 1, stream, ck.function, ck.packed_metadata, None, None, None, *bound)
            fns["search, CompiledKernel.run direct"] = lambda: ck.run(
                g[0], 1, 1, stream, ck.function, ck.packed_metadata, None, None, None, *bound)
            runner = ck[g]
            fns["search, CompiledKernel[grid](...)"] = lambda: runner(*bound)
            fns["search, kernel[grid](...) same args"] = lambda: T._hash_search_kernel[g](*search_args, **cexpr)
        except Exception as e:  # noqa: BLE001 - probe: report and go on
            print(f"direct launch failed: {type(e).__name__}: {str(e)[:300]}")
        times, errors = B.interleaved_ms(fns, iters=200)
        for label in fns:
            if label in errors:
                print(f"N={N} {label}: ERROR {errors[label]}")
                continue
            print(f"PROBE N={N} {label:32s} event {times[label]:.4f} ms  host {host_us(fns[label]):7.1f} us")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
