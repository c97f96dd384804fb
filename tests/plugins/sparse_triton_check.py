"""Checks the Triton launchers against the torch reference.

Run as a script: ``python sparse_triton_check.py cpu`` (needs
TRITON_INTERPRET=1 in the environment before Triton is imported, so the
pytest wrapper runs it in a subprocess) or ``... cuda`` on a GPU machine.
Prints one line per case and exits non-zero on the first mismatch.
"""

from __future__ import annotations

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import torch  # noqa: E402

from hybrid_trt.plugins.sparse import reference as R  # noqa: E402
from hybrid_trt.plugins.sparse import triton_gemm as G  # noqa: E402
from hybrid_trt.plugins.sparse import triton_rulebook as T  # noqa: E402
from hybrid_trt.plugins.sparse.geometry import conv_output_shape, subm_padding  # noqa: E402
from sparse_dense_ref import random_cloud  # noqa: E402

# (batch, spatial_shape, density)
CLOUDS = {
    "random": (2, (5, 6, 7), 0.15),
    "empty": (1, (4, 4, 4), 0.0),
    "single": (1, (1, 1, 1), 1.0),
}
# kernel_size, stride, padding, dilation; stride 1 + subm padding = SubM.
GEOMS = {
    "subm3": ((3, 3, 3), (1, 1, 1), None, (1, 1, 1)),
    "subm_dil": ((3, 1, 3), (1, 1, 1), None, (2, 1, 1)),
    "down": ((3, 3, 3), (2, 2, 2), (1, 1, 1), (1, 1, 1)),
    "odd": ((2, 3, 1), (2, 1, 3), (0, 1, 0), (1, 2, 1)),
}
# (Cin, Cout): below the 16-wide dot minimum, and wider than one K tile.
CHANNELS = [(5, 3), (40, 20)]


def check(device: str) -> int:
    failures = 0
    tol = {torch.float32: 1e-4, torch.float16: 2e-2}
    for cname, (batch, shape, density) in CLOUDS.items():
        _, indices = random_cloud(batch, shape, density, 1, seed=11)
        indices = indices.to(device)
        for gname, (ks, st, pad, dil) in GEOMS.items():
            pad = subm_padding(ks, dil) if pad is None else pad
            try:
                out_shape = conv_output_shape(shape, ks, st, pad, dil)
            except ValueError:
                continue
            out_idx, ref_nbr = R.strided_rulebook(indices, out_shape, ks, st, pad, dil)
            ref_order = R.mask_order(ref_nbr)
            got_idx, got_nbr, got_order = T.strided_rulebook(indices, shape, out_shape, ks, st, pad, dil)
            ok_s = torch.equal(got_idx, out_idx) and torch.equal(got_nbr, ref_nbr) and torch.equal(got_order, ref_order)
            if st == (1, 1, 1) and pad == subm_padding(ks, dil):  # the fused SubM launcher too
                subm_nbr = R.neighbor_map(indices, indices, shape, ks, st, pad, dil)
                got_nbr, got_order = T.subm_rulebook(indices, shape, ks, dil)
                ok_s = ok_s and torch.equal(got_nbr, subm_nbr) and torch.equal(got_order, R.mask_order(subm_nbr))
            nbr = T.neighbor_search(out_idx, indices, shape, ks, st, pad, dil)
            ok = torch.equal(nbr, ref_nbr)
            ref_t = R.transpose_neighbor_map(ref_nbr, indices.shape[0])
            ok_t = torch.equal(T.transpose_neighbor_map(ref_nbr, indices.shape[0]), ref_t)
            ok_o = torch.equal(T.mask_order(ref_nbr), R.mask_order(ref_nbr))
            print(f"{device} {cname} {gname} rulebook M={out_idx.shape[0]} strided={ok_s} search={ok} "
                  f"transpose={ok_t} order={ok_o}")
            failures += (not ok_s) + (not ok) + (not ok_t) + (not ok_o)
            # Wide channels only on the random cloud: the interpreter is slow.
            wide = cname == "random" and gname in ("subm3", "down")
            for c_in, c_out in CHANNELS if wide else CHANNELS[:1]:
                g = torch.Generator().manual_seed(c_in)
                feats = torch.randn((indices.shape[0], c_in), generator=g).to(device)
                weight = (torch.randn((c_out, *ks, c_in), generator=g) * 0.2).to(device)
                bias = torch.randn((c_out,), generator=g).to(device)
                for dtype in (torch.float32, torch.float16):
                    for b in (bias, None) if dtype == torch.float32 else (bias,):
                        args = (feats.to(dtype), weight.to(dtype), ref_nbr, None if b is None else b.to(dtype))
                        want = R.conv_compute(*args).float()
                        # Row schedules: none, the mask sort, a random permutation.
                        order = [None, R.mask_order(ref_nbr), torch.randperm(ref_nbr.shape[0]).to(device, torch.int32)]
                        got = G.conv_compute(*args, order=order[(c_in + int(b is None)) % 3])
                        scale = 1.0 + (want.abs().max().item() if want.numel() else 0.0)
                        err = (got.float() - want).abs().max().item() if want.numel() else 0.0
                        good = got.dtype == dtype and got.shape == want.shape and err <= tol[dtype] * scale
                        if b is not None and (c_in, c_out) == CHANNELS[0]:
                            # The TensorRT plugin's entry point: the same kernel reading a [K, Cin, Cout] weight.
                            kcc = G.conv_compute_kcc(args[0], G.weight_kcc(args[1]), ref_nbr, args[3],
                                                     torch.empty_like(got), order[(c_in + 1) % 3])
                            err_kcc = (kcc.float() - want).abs().max().item() if want.numel() else 0.0
                            good = good and err_kcc <= tol[dtype] * scale
                        failures += not good
                        if not good or cname == "random":
                            print(f"  compute {c_in}->{c_out} {dtype} bias={b is not None} max_err={err:.3g} ok={good}")
    failures += check_wide_keys(device)
    print("FAILURES", failures)
    return failures


def check_wide_keys(device: str) -> int:
    """Strided rulebooks whose keys do not fit int32: through the overflow
    flag (one sample's grid fits, a high batch index does not) and straight
    to int64 (one sample's grid alone is too big); and a 5x5x5 kernel, whose
    row order sorts by neighbour count rather than bitmask."""
    failures = 0
    cases = [
        ("batch overflow", torch.tensor([[0, 3, 5, 7], [21, 1000, 20, 1023], [21, 1001, 20, 1022]]),
         (1024, 1024, 1024), (3, 3, 3), (2, 2, 2), (1, 1, 1)),
        ("int64 grid", torch.tensor([[0, 0, 0, 0], [1, 4095, 2047, 511], [1, 4094, 2047, 511]]),
         (4096, 2048, 512), (1, 2, 1), (1, 1, 1), (0, 1, 0)),
    ]
    for name, indices, shape, ks, st, pad in cases:
        indices = indices.to(device, torch.int32)
        out_shape = conv_output_shape(shape, ks, st, pad, (1, 1, 1))
        want = R.strided_rulebook(indices, out_shape, ks, st, pad, (1, 1, 1))
        want = (*want, R.mask_order(want[1]))
        got = T.strided_rulebook(indices, shape, out_shape, ks, st, pad, (1, 1, 1))
        ok = all(torch.equal(a, b) for a, b in zip(got, want))
        print(f"{device} {name} strided M={want[0].shape[0]} ok={ok}")
        failures += not ok
    _, indices = random_cloud(1, (6, 6, 6), 0.3, 1, seed=3)
    nbr = R.neighbor_map(indices.to(device), indices.to(device), (6, 6, 6), (5, 5, 5), (1, 1, 1), (2, 2, 2), (1, 1, 1))
    ok = torch.equal(T.mask_order(nbr), R.mask_order(nbr))
    print(f"{device} order 5x5x5 ok={ok}")
    return failures + (not ok)


def check_modules_on(device: str) -> int:
    """The dispatcher routes the ops to the Triton kernels on CUDA; a small
    U-Net must give the CPU result for fp32 and fp16."""
    from hybrid_trt.plugins.sparse import (
        SparseConv3d, SparseConvTensor, SparseInverseConv3d, SparseSequential, SubMConv3d,
    )

    torch.manual_seed(0)
    net = SparseSequential(
        SubMConv3d(4, 32, 3, indice_key="s0"), torch.nn.ReLU(),
        SparseConv3d(32, 64, 3, stride=2, padding=1, indice_key="d"), torch.nn.ReLU(),
        SubMConv3d(64, 64, 3, indice_key="s1"),
        SparseInverseConv3d(64, 16, 3, indice_key="d"),
    ).eval()
    feats, indices = random_cloud(2, (16, 40, 40), 0.05, 4, seed=12)
    failures = 0
    with torch.no_grad():
        want = net(SparseConvTensor(feats, indices, (16, 40, 40), 2)).features
        for dtype, tol in ((torch.float32, 1e-4), (torch.float16, 3e-2)):
            net_d = net.to(device=device, dtype=dtype)
            got = net_d(SparseConvTensor(feats.to(device, dtype), indices.to(device), (16, 40, 40), 2)).features
            err = (got.float().cpu() - want).abs().max().item()
            ok = err <= tol * (1 + want.abs().max().item())
            failures += not ok
            print(f"{device} modules {dtype} N={indices.shape[0]} max_err={err:.3g} ok={ok}")
        net.float().cpu()
    return failures


def check_preloaded_neighbours(device: str) -> int:
    """The GEMM variant that loads a tile's whole neighbour block at once
    (PRELOAD_NBR, an autotuning candidate on CUDA) against the reference,
    with a row order, a bias and rows past M in the last tile."""
    import triton

    torch.manual_seed(1)
    failures = 0
    for m, c_in, c_out in ((37, 16, 16), (70, 40, 20)):
        feats = torch.randn(m, c_in, device=device)
        weight = torch.randn(c_out, 3, 3, 3, c_in, device=device) * 0.1
        bias = torch.randn(c_out, device=device)
        nbr = torch.randint(-3, m, (m, 27), device=device, dtype=torch.int32).clamp(min=-1)
        order = torch.randperm(m, device=device, dtype=torch.int32)
        out = torch.empty(m, c_out, device=device)
        w = G.weight_kcc(weight)
        grid = (triton.cdiv(m, 16), triton.cdiv(c_out, 16))
        G._implicit_gemm_kernel[grid](feats, w, nbr, order, bias, m, out, CIN=c_in, COUT=c_out, K=27, HAS_ORDER=True,
                                      HAS_BIAS=True, PRECISION="ieee", W_KCC=True, BLOCK_M=16, BLOCK_N=16,
                                      BLOCK_K=16, PRELOAD_NBR=True, KP=32)
        want = R.conv_compute(feats, weight, nbr, bias)
        err = (out - want).abs().max().item()
        ok = err <= 1e-4 * (1 + want.abs().max().item())
        failures += not ok
        print(f"{device} preloaded neighbours M={m} {c_in}->{c_out} max_err={err:.3g} ok={ok}")
    return failures


def check_row_buckets(device: str) -> int:
    """Autotuned tiles are kept per power of two of the row count: one
    channel pair at 1k and 100k rows gets two tunings, and both results match
    the torch reference."""
    torch.manual_seed(0)
    failures, before = 0, set(G._TUNED)
    for m in (1000, 100_000):
        feats = torch.randn(m, 32, device=device, dtype=torch.float16)
        weight = torch.randn(48, 3, 3, 3, 32, device=device, dtype=torch.float16) * 0.1
        nbr = torch.randint(-1, m, (m, 27), device=device, dtype=torch.int32)
        got = G.conv_compute(feats, weight, nbr, None)
        want = R.conv_compute(feats.float(), weight.float(), nbr, None)
        err = (got.float() - want).abs().max().item()
        ok = err <= 3e-2 * (1 + want.abs().max().item())
        failures += not ok
        print(f"{device} rows={m} bucket={G.rows_bucket(m)} max_err={err:.3g} ok={ok}")
    tuned = {k for k in set(G._TUNED) - before if k[:2] == (32, 48)}
    ok = not G._AUTOTUNE or len(tuned) == 2
    print(f"{device} tunings for 2 row buckets: {sorted(tuned)} ok={ok}")
    return failures + (not ok)


if __name__ == "__main__":
    device = sys.argv[1] if len(sys.argv) > 1 else "cpu"
    failures = check(device) + check_preloaded_neighbours(device)
    if device != "cpu":
        failures += check_modules_on(device)
        failures += check_row_buckets(device)
    print("TOTAL FAILURES", failures)
    sys.exit(1 if failures else 0)
