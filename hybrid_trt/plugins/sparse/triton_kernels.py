"""Triton kernels for the CUDA implementations of the sparse ops.

Imported lazily (first CUDA call, or explicitly by tests) because Triton's
interpreter (``TRITON_INTERPRET=1``) must be enabled before ``@triton.jit``
runs. The launchers take plain tensors on any device Triton can run on, so
the interpreter tests drive them with CPU tensors.

Kernels:
  * ``neighbor_search``: for every (output site, kernel offset) compute the
    input coordinate, bounds-check it and binary-search its key in the
    sorted input keys. Covers SubM (stride 1, centred padding) and strided
    convs with one kernel.
  * ``transpose_neighbor_map``: scatter the inverse-conv rulebook.
  * ``conv_compute``: implicit GEMM over the neighbour map. Each program
    owns a BLOCK_M x BLOCK_N output tile, walks the K kernel offsets, gathers
    the BLOCK_M input rows each offset reads (masked where inactive) and
    accumulates A @ W[k] in fp32. Offsets with no active neighbour in the
    tile are skipped, which is most of them in SubM layers.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from .geometry import Triple

_INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"


@triton.jit
def _neighbor_search_kernel(
    out_idx_ptr, sorted_keys_ptr, perm_ptr, nbr_ptr,
    total, N, n_iter,
    D, H, W,
    SZ, SY, SX, PZ, PY, PX, DZ, DY, DX,
    KY: tl.constexpr, KX: tl.constexpr, K: tl.constexpr,
    BLOCK: tl.constexpr,
):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < total
    m = offs // K
    k = offs % K
    kz = k // (KY * KX)
    ky = (k // KX) % KY
    kx = k % KX
    b = tl.load(out_idx_ptr + m * 4 + 0, mask=mask, other=0).to(tl.int64)
    z = tl.load(out_idx_ptr + m * 4 + 1, mask=mask, other=0).to(tl.int64) * SZ - PZ + kz * DZ
    y = tl.load(out_idx_ptr + m * 4 + 2, mask=mask, other=0).to(tl.int64) * SY - PY + ky * DY
    x = tl.load(out_idx_ptr + m * 4 + 3, mask=mask, other=0).to(tl.int64) * SX - PX + kx * DX
    ok = mask & (z >= 0) & (z < D) & (y >= 0) & (y < H) & (x >= 0) & (x < W)
    key = ((b * D + z) * H + y) * W + x

    # Branch-free lower_bound: every lane runs n_iter = ceil(log2(N + 1)) steps.
    lo = tl.zeros([BLOCK], dtype=tl.int64)
    hi = tl.zeros([BLOCK], dtype=tl.int64) + N
    for _ in range(n_iter):
        active = lo < hi
        mid = (lo + hi) // 2
        v = tl.load(sorted_keys_ptr + mid, mask=ok & active, other=0)
        right = v < key
        lo = tl.where(active & right, mid + 1, lo)
        hi = tl.where(active & (~right), mid, hi)
    hit_ok = ok & (lo < N)
    hit = hit_ok & (tl.load(sorted_keys_ptr + lo, mask=hit_ok, other=-1) == key)
    row = tl.load(perm_ptr + lo, mask=hit, other=-1)
    tl.store(nbr_ptr + offs, tl.where(hit, row, -1).to(tl.int32), mask=mask)


@triton.jit
def _transpose_kernel(nbr_ptr, nbr_t_ptr, total, K: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < total
    i = tl.load(nbr_ptr + offs, mask=mask, other=-1).to(tl.int64)
    m = (offs // K).to(tl.int32)
    k = offs % K
    tl.store(nbr_t_ptr + i * K + k, m, mask=mask & (i >= 0))


# Parameter order is (input pointers, scalars, output pointer): the calling
# convention TensorRT's AOT plugins launch with (see trt_plugin.py). Channel
# counts and the kernel volume are constexpr so the reduction loops unroll;
# the row count M varies with every point cloud and stays a runtime value.
@triton.jit
def _implicit_gemm_kernel(
    feat_ptr, w_ptr, nbr_ptr, order_ptr, bias_ptr,
    M,
    out_ptr,
    CIN: tl.constexpr, COUT: tl.constexpr,
    K: tl.constexpr,
    HAS_ORDER: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    slot = pid_m.to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    m_mask = slot < M
    if HAS_ORDER:
        # Rows sorted by neighbour mask: a tile's rows share their active
        # offsets, so whole offsets are skipped below. Any permutation is
        # correct; the order only changes how much work is skipped.
        rm = tl.load(order_ptr + slot, mask=m_mask, other=0).to(tl.int64)
    else:
        rm = slot
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_mask = rn < COUT
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(K):
        idx = tl.load(nbr_ptr + rm * K + k, mask=m_mask, other=-1)
        if tl.max(idx, axis=0) >= 0:
            valid = idx >= 0
            row = idx.to(tl.int64) * CIN
            for c0 in range(0, CIN, BLOCK_K):
                rc = c0 + tl.arange(0, BLOCK_K)
                c_mask = rc < CIN
                a = tl.load(
                    feat_ptr + row[:, None] + rc[None, :],
                    mask=valid[:, None] & c_mask[None, :],
                    other=0.0,
                )
                b = tl.load(
                    w_ptr + (k * CIN + rc[:, None]).to(tl.int64) * COUT + rn[None, :],
                    mask=c_mask[:, None] & n_mask[None, :],
                    other=0.0,
                )
                acc = tl.dot(a, b, acc, input_precision=PRECISION)
    if HAS_BIAS:
        acc += tl.load(bias_ptr + rn, mask=n_mask, other=0.0).to(tl.float32)[None, :]
    out_ptrs = out_ptr + rm[:, None] * COUT + rn[None, :]
    tl.store(out_ptrs, acc.to(out_ptr.dtype.element_ty), mask=m_mask[:, None] & n_mask[None, :])


def _sorted_keys(indices: torch.Tensor, spatial_shape) -> tuple[torch.Tensor, torch.Tensor]:
    from .reference import sort_keys

    return sort_keys(indices, spatial_shape)


def neighbor_search(
    out_indices: torch.Tensor,
    in_indices: torch.Tensor,
    in_spatial_shape,
    kernel_size: Triple,
    stride: Triple,
    padding: Triple,
    dilation: Triple,
) -> torch.Tensor:
    K = kernel_size[0] * kernel_size[1] * kernel_size[2]
    M, N = out_indices.shape[0], in_indices.shape[0]
    nbr = torch.empty((M, K), dtype=torch.int32, device=out_indices.device)
    if M == 0:
        return nbr
    if N == 0:
        return nbr.fill_(-1)
    # Sorting stays with torch (CUB radix sort on CUDA); the search is ours.
    sorted_keys, perm = _sorted_keys(in_indices, in_spatial_shape)
    perm = perm.to(torch.int32)
    total = M * K
    BLOCK = 256
    grid = (triton.cdiv(total, BLOCK),)
    D, H, W = (int(s) for s in in_spatial_shape)
    _neighbor_search_kernel[grid](
        out_indices.contiguous(), sorted_keys, perm, nbr,
        total, N, int(N).bit_length(),
        D, H, W,
        *stride, *padding, *dilation,
        KY=kernel_size[1], KX=kernel_size[2], K=K,
        BLOCK=BLOCK,
    )
    return nbr


def transpose_neighbor_map(nbr: torch.Tensor, num_in: int) -> torch.Tensor:
    M, K = nbr.shape
    nbr_t = torch.full((num_in, K), -1, dtype=torch.int32, device=nbr.device)
    total = M * K
    if total == 0 or num_in == 0:
        return nbr_t
    BLOCK = 256
    _transpose_kernel[(triton.cdiv(total, BLOCK),)](nbr.contiguous(), nbr_t, total, K=K, BLOCK=BLOCK)
    return nbr_t


def _pow2_clamp(n: int, lo: int, hi: int) -> int:
    return max(lo, min(hi, triton.next_power_of_2(max(int(n), 1))))


_AUTOTUNE = os.environ.get("HYBRID_TRT_SPARSE_AUTOTUNE", "1") == "1" and not _INTERPRET
_TUNED: dict = {}


def _tuned_kernel(c_in: int, c_out: int):
    """An autotuned wrapper per channel-count pair: tile candidates are
    clamped to the channels, so narrow layers don't benchmark useless tiles."""
    key = (c_in, c_out)
    if key not in _TUNED:
        bn64, bn128 = _pow2_clamp(c_out, 16, 64), _pow2_clamp(c_out, 16, 128)
        bk32, bk64 = _pow2_clamp(c_in, 16, 32), _pow2_clamp(c_in, 16, 64)
        shapes = {
            (128, bn64, bk32, 4, 3), (64, bn64, bk32, 4, 3), (64, bn64, bk64, 4, 3),
            (128, bn128, bk32, 8, 3), (64, bn128, bk64, 4, 3), (128, bn64, bk64, 4, 2),
            (32, bn64, bk32, 2, 3),
        }
        configs = [
            triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk}, num_warps=w, num_stages=st)
            for bm, bn, bk, w, st in sorted(shapes)
        ]
        _TUNED[key] = triton.autotune(configs=configs, key=["CIN", "COUT", "K"])(_implicit_gemm_kernel)
    return _TUNED[key]


def gemm_config(m: int, c_in: int, c_out: int) -> dict:
    """Tile sizes: tl.dot needs every dimension >= 16; wide output tiles reuse
    each gathered A tile across more output channels."""
    if _INTERPRET:
        return dict(BLOCK_M=16, BLOCK_N=_pow2_clamp(c_out, 16, 32), BLOCK_K=_pow2_clamp(c_in, 16, 32))
    block_n = _pow2_clamp(c_out, 16, 128)
    block_k = _pow2_clamp(c_in, 16, 64)
    block_m = 64 if block_n >= 128 else 128
    return dict(BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, num_warps=4 if block_n <= 64 else 8, num_stages=2)


def weight_kcc(weight: torch.Tensor) -> torch.Tensor:
    """spconv ``[Cout, kD, kH, kW, Cin]`` -> ``[K, Cin, Cout]``, so each W[k]
    tile is a row-major B operand of the GEMM."""
    c_out, c_in = weight.shape[0], weight.shape[-1]
    return weight.reshape(c_out, -1, c_in).permute(1, 2, 0).contiguous()


def conv_compute_kcc(
    features: torch.Tensor,
    w_kcc: torch.Tensor,
    nbr: torch.Tensor,
    bias: torch.Tensor | None,
    out: torch.Tensor,
    order: torch.Tensor | None = None,
    allow_tf32: bool = False,
) -> torch.Tensor:
    """Implicit GEMM into ``out`` with an already transposed weight."""
    M, K = nbr.shape
    _, c_in, c_out = w_kcc.shape
    if M == 0:
        return out
    precision = "tf32" if (allow_tf32 and features.dtype == torch.float32) else "ieee"
    nbr = nbr.contiguous()
    args = (
        features.contiguous(), w_kcc, nbr, order if order is not None else nbr,
        bias if bias is not None else w_kcc, M, out,
    )
    meta = dict(CIN=c_in, COUT=c_out, K=K, HAS_ORDER=order is not None, HAS_BIAS=bias is not None, PRECISION=precision)
    if _AUTOTUNE and out.is_cuda:
        grid = lambda cfg: (triton.cdiv(M, cfg["BLOCK_M"]), triton.cdiv(c_out, cfg["BLOCK_N"]))  # noqa: E731
        _tuned_kernel(c_in, c_out)[grid](*args, **meta)
    else:
        cfg = gemm_config(M, c_in, c_out)
        grid = (triton.cdiv(M, cfg["BLOCK_M"]), triton.cdiv(c_out, cfg["BLOCK_N"]))
        _implicit_gemm_kernel[grid](*args, **meta, **cfg)
    return out


def conv_compute(
    features: torch.Tensor,
    weight: torch.Tensor,
    nbr: torch.Tensor,
    bias: torch.Tensor | None,
    order: torch.Tensor | None = None,
    allow_tf32: bool = False,
) -> torch.Tensor:
    out = torch.empty((nbr.shape[0], weight.shape[0]), dtype=features.dtype, device=features.device)
    w = weight_kcc(weight.to(features.dtype))
    b = None if bias is None else bias.to(features.dtype).contiguous()
    return conv_compute_kcc(features, w, nbr, b, out, order, allow_tf32)
