"""Quick CUDA check of the rulebook launchers against the torch reference on LiDAR-like clouds (exact match of
map, order and sites), each launcher called three times so later calls take the direct launch path.
Usage: python scripts/rulebook_cuda_quick.py [cpu]   (cpu: tiny clouds, under TRITON_INTERPRET=1)"""
import sys
import pathlib

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "examples"))
import lidar_detector  # noqa: E402
from hybrid_trt.plugins.sparse import reference as R  # noqa: E402
from hybrid_trt.plugins.sparse import triton_rulebook as T  # noqa: E402

grid, ks, st, pad, dil = (41, 1600, 1408), (3, 3, 3), (2, 2, 2), (1, 1, 1), (1, 1, 1)
device = sys.argv[1] if len(sys.argv) > 1 else "cuda"
failures = 0
for n, batch in ((3000, 1), (20000, 2)) if device == "cuda" else ((60, 1), (90, 2)):
    cfg = lidar_detector.DetectorConfig(grid=grid, voxels_per_sample=n, batch_size=batch)
    _, coords = lidar_detector.make_inputs(cfg, device, torch.float16, seed=1)
    out_shape = tuple((g + 2 * p - d * (k - 1) - 1) // s + 1 for g, k, s, p, d in zip(grid, ks, st, pad, dil))
    ref_nbr = R.neighbor_map(coords, coords, grid, ks, (1, 1, 1), (1, 1, 1), dil)
    ref_sub = (ref_nbr, R.mask_order(ref_nbr))
    ref_str = R.strided_rulebook(coords, out_shape, ks, st, pad, dil)
    for call in range(3):
        sub = T.subm_rulebook(coords, grid, ks, dil)
        strd = T.strided_rulebook(coords, grid, out_shape, ks, st, pad, dil)
        ok_sub = all(torch.equal(a, b) for a, b in zip(sub, ref_sub))
        ok_str = (all(torch.equal(a.to(b.dtype), b) for a, b in zip(strd[:2], ref_str))
                  and torch.equal(strd[2].cpu(), torch.arange(strd[0].shape[0], dtype=torch.int32)))
        failures += (not ok_sub) + (not ok_str)
        print(f"N={coords.shape[0]} call {call}: subm ok={ok_sub} strided ok={ok_str}")
direct = {k.__name__: sum(v is not None for v in k._compiled.values())
          for k in (T._hash_insert_kernel, T._hash_search_kernel, T._strided_sites_kernel, T._strided_push_kernel)}
print("direct launchers per kernel:", direct)
failures += device == "cuda" and not all(direct.values())
print(f"FAILURES {failures}")
raise SystemExit(1 if failures else 0)
