"""Triton implicit-GEMM kernel of ``sparse_conv_compute`` (CUDA).

Each program owns a BLOCK_M x BLOCK_N output tile, walks the K kernel
offsets, gathers the BLOCK_M input rows each offset reads (masked where
inactive) and accumulates A @ W[k] in fp32. Offsets with no active
neighbour in the tile are skipped, which is most of them in SubM layers.
In half precision the weight is read in spconv's ``[Cout, kD, kH, kW, Cin]``
layout as the op receives it (no per-call transpose); float32 reads a
``[K, Cin, Cout]`` copy (``W_KCC``), made once per weight and reused while
the weight is unchanged; the TensorRT plugin passes ``[K, Cin, Cout]`` too,
which its engine transposes once at build.

Imported lazily (first CUDA call, or explicitly by tests) because Triton's
interpreter (``TRITON_INTERPRET=1``) must be enabled before ``@triton.jit``
runs. The launchers take plain tensors on any device Triton can run on, so
the interpreter tests drive them with CPU tensors. The same kernel is
compiled ahead of time for the TensorRT plugin (aot.py).
"""

from __future__ import annotations

import functools

import torch
import torch.utils.weak
from torch.multiprocessing.reductions import StorageWeakRef
import triton
import triton.language as tl

from ...options import env_flag
from .triton_launch import triton_interprets

_INTERPRET = triton_interprets()


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
    W_KCC: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    PRELOAD_NBR: tl.constexpr = False, KP: tl.constexpr = 32,
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
    if PRELOAD_NBR:
        # The tile's whole [BLOCK_M, K] neighbour block in one load (KP: K
        # padded to a power of two), and which offsets any row reads: the
        # offset loop below then waits on no load to decide what to skip
        # (27 dependent loads per tile made sparse strided layers, whose rows
        # read ~3 of 27 offsets, latency-bound).
        kk = tl.arange(0, KP)
        block = tl.load(nbr_ptr + rm[:, None] * K + kk[None, :], mask=m_mask[:, None] & (kk < K)[None, :],
                        other=-1)
        live = tl.max(block, axis=0)
    for k in range(K):
        if PRELOAD_NBR:
            idx = tl.max(tl.where(kk[None, :] == k, block, -1), axis=1)
            any_live = tl.max(tl.where(kk == k, live, -1), axis=0) >= 0
        else:
            idx = tl.load(nbr_ptr + rm * K + k, mask=m_mask, other=-1)
            any_live = tl.max(idx, axis=0) >= 0
        if any_live:
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
                if W_KCC:  # [K, Cin, Cout]: the TensorRT plugin's weight, transposed when the engine is built
                    w_off = (k * CIN + rc[:, None]).to(tl.int64) * COUT + rn[None, :]
                else:  # spconv's [Cout, K, Cin], read in place (Cin contiguous, like A's rows)
                    w_off = (rn[None, :].to(tl.int64) * K + k) * CIN + rc[:, None]
                b = tl.load(w_ptr + w_off, mask=c_mask[:, None] & n_mask[None, :], other=0.0)
                acc = tl.dot(a, b, acc, input_precision=PRECISION)
    if HAS_BIAS:
        acc += tl.load(bias_ptr + rn, mask=n_mask, other=0.0).to(tl.float32)[None, :]
    out_ptrs = out_ptr + rm[:, None] * COUT + rn[None, :]
    tl.store(out_ptrs, acc.to(out_ptr.dtype.element_ty), mask=m_mask[:, None] & n_mask[None, :])


def _cdiv(a: int, b: int) -> int:
    # Not triton.cdiv: on the host that is a constexpr-function call, ~3 us each.
    return -(-a // b)


def _pow2_clamp(n: int, lo: int, hi: int) -> int:
    return max(lo, min(hi, triton.next_power_of_2(max(int(n), 1))))


_AUTOTUNE = env_flag("HYBRID_TRT_SPARSE_AUTOTUNE", True) and not _INTERPRET  # the interpreter: fixed tiles


def rows_bucket(m: int) -> int:
    """The row-count class a tuned tile is kept for: M's power of two. A
    tile tuned on 10k voxels (a few hundred programs) is not the one for
    150k: tuned once per channel pair, the sweep's 10k choice served its
    150k cases, the cases slower than spconv's."""
    return int(m).bit_length()


@functools.lru_cache(maxsize=None)  # one autotuner per process and key: it keeps the tile it chose
def _tuned_kernel(c_in: int, c_out: int, k: int, bucket: int, fma: bool):
    """An autotuned wrapper per channel-count pair, kernel volume, row bucket
    and math (``fma``: float32 without TF32, whose dot runs on FMA units):
    tile candidates are clamped to the channels, so narrow layers don't
    benchmark useless tiles; the neighbour block is loaded at once only
    where it fits in registers (K <= 32)."""
    bn64, bn128 = _pow2_clamp(c_out, 16, 64), _pow2_clamp(c_out, 16, 128)
    bk16, bk32, bk64 = _pow2_clamp(c_in, 16, 16), _pow2_clamp(c_in, 16, 32), _pow2_clamp(c_in, 16, 64)
    shapes = {
        (128, bn64, bk32, 4, 3), (64, bn64, bk32, 4, 3), (64, bn64, bk64, 4, 3),
        (128, bn128, bk32, 8, 3), (64, bn128, bk64, 4, 3), (128, bn64, bk64, 4, 2),
        (32, bn64, bk32, 2, 3), (128, bn128, bk64, 8, 3), (256, bn64, bk32, 8, 3),
    }
    if fma:  # FMA dots keep whole tiles in registers: narrower K steps, more warps per tile
        shapes |= {(64, bn64, bk16, 4, 2), (128, bn64, bk16, 8, 2), (128, bn128, bk16, 8, 2)}
    configs = [
        triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk}, num_warps=w, num_stages=st)
        for bm, bn, bk, w, st in sorted(shapes)
    ] + [  # the neighbour block loaded at once (PRELOAD_NBR), on the tiles large row counts pick
        triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "PRELOAD_NBR": True}, num_warps=w,
                      num_stages=st)
        for bm, bn, bk, w, st in sorted({(64, bn64, bk32, 4, 3), (128, bn64, bk32, 4, 3),
                                         (128, bn64, bk64, 8, 3), (64, bn128, bk64, 4, 3)})
        if k <= 32
    ]
    return triton.autotune(configs=configs, key=["CIN", "COUT", "K"])(_implicit_gemm_kernel)


@functools.lru_cache(maxsize=None)
def _fixed_config(c_in: int, c_out: int) -> dict:
    """Tile sizes: tl.dot needs every dimension >= 16; wide output tiles reuse
    each gathered A tile across more output channels."""
    if _INTERPRET:
        return dict(BLOCK_M=16, BLOCK_N=_pow2_clamp(c_out, 16, 32), BLOCK_K=_pow2_clamp(c_in, 16, 32))
    block_n = _pow2_clamp(c_out, 16, 128)
    block_k = _pow2_clamp(c_in, 16, 64)
    block_m = 64 if block_n >= 128 else 128
    return dict(BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, num_warps=4 if block_n <= 64 else 8, num_stages=2)


def gemm_config(c_in: int, c_out: int) -> dict:
    """The fixed tiles: the JIT launcher's without autotuning (HYBRID_TRT_SPARSE_AUTOTUNE=0, the interpreter) and
    the AOT kernel's always; a copy the caller may change."""
    return dict(_fixed_config(c_in, c_out))


# Everything a launch passes besides tensors and M (constexprs, tiles, warps,
# stages), per everything that selects a compiled kernel: computed (or, with
# autotuning, chosen by the autotuner) on the first call, then reused, so a
# call skips the autotuner's per-call key building and this dict's assembly.
_LAUNCH_KWARGS: dict = {}


def weight_kcc(weight: torch.Tensor) -> torch.Tensor:
    """spconv ``[Cout, kD, kH, kW, Cin]`` -> ``[K, Cin, Cout]``, the layout the
    TensorRT plugin takes (the lowering's transpose, folded at engine build)."""
    c_out, c_in = weight.shape[0], weight.shape[-1]
    return weight.reshape(c_out, -1, c_in).permute(1, 2, 0).contiguous()


# float32 weights in [K, Cin, Cout], per weight tensor (held weakly, so an
# entry goes with its weight): the copy cost ~19 us of host time per call on
# the H200's host, a fifth of a cached layer's launch path. An entry is used
# only while the weight's version counter and storage are the ones it was made
# from (an in-place update or a `.data` swap makes a fresh copy; an in-place
# edit through `.data`, which moves no version counter, is not seen, as
# everywhere in torch that relies on it). The storage is referenced weakly: an
# address compares equal only while the storage it was read from is alive, so
# a freed one handed to a later `.data` swap cannot pass for it.
_KCC = torch.utils.weak.WeakIdKeyDictionary()


def _weight_kcc_reused(weight: torch.Tensor) -> torch.Tensor:
    if weight.is_inference():  # no version counter: an in-place change could not be seen
        return weight_kcc(weight)
    # Only on the legacy default stream. Inductor's CUDA-graph trees warm up
    # and capture on a stream of their own, where allocations go to the
    # graph's private pool (a copy kept from there would be memory the pool
    # may hand out again), and a replay must transpose the live weight; a
    # capture never runs on the legacy default stream.
    if weight.is_cuda and torch._C._cuda_getCurrentRawStream(weight.get_device()) != 0:
        return weight_kcc(weight)
    stamp = (weight._version, weight.data_ptr(), weight.shape, weight.stride())
    hit = _KCC.get(weight)
    if hit is not None and hit[0] == stamp and not hit[2].expired():
        return hit[1]
    kcc = weight_kcc(weight)
    storage = weight.untyped_storage()
    if kcc.untyped_storage().data_ptr() != storage.data_ptr():  # a view would hold its weight alive: no entry
        _KCC[weight] = (stamp, kcc, StorageWeakRef(storage))
    elif hit is not None:
        del _KCC[weight]
    return kcc


def forget_weight_kcc(weight: torch.Tensor) -> None:
    """Drop ``weight``'s float32 copy (its layer now runs in another dtype)."""
    if _KCC:
        _KCC.pop(weight, None)


def _launch(features, weight, nbr, bias, out, order, allow_tf32: bool, w_kcc: bool) -> torch.Tensor:
    M, K = nbr.shape
    if M == 0:
        return out
    c_in, c_out = features.shape[1], out.shape[1]
    precision = "tf32" if (allow_tf32 and features.dtype == torch.float32) else "ieee"
    has_order, has_bias = order is not None, bias is not None
    args = (features, weight, nbr, order.contiguous() if has_order else nbr, bias if has_bias else weight, M, out)
    tuned = _AUTOTUNE and out.is_cuda
    bucket = rows_bucket(M) if tuned else 0
    key = (c_in, c_out, K, features.dtype, weight.dtype, has_order, has_bias, precision, w_kcc, tuned, bucket)
    kwargs = _LAUNCH_KWARGS.get(key)
    if kwargs is None:
        meta = dict(CIN=c_in, COUT=c_out, K=K, HAS_ORDER=has_order, HAS_BIAS=has_bias, PRECISION=precision,
                    W_KCC=w_kcc, KP=triton.next_power_of_2(K))
        if tuned:
            tuner = _tuned_kernel(c_in, c_out, K, bucket, precision == "ieee" and features.dtype == torch.float32)
            tuner[lambda c: (_cdiv(M, c["BLOCK_M"]), _cdiv(c_out, c["BLOCK_N"]))](*args, **meta)
            best = getattr(tuner, "best_config", None)
            if best is not None:
                _LAUNCH_KWARGS[key] = {**meta, **best.all_kwargs()}
            return out
        kwargs = _LAUNCH_KWARGS[key] = {**meta, **_fixed_config(c_in, c_out)}
    _implicit_gemm_kernel[(_cdiv(M, kwargs["BLOCK_M"]), _cdiv(c_out, kwargs["BLOCK_N"]))](*args, **kwargs)
    return out


def conv_compute_kcc(
    features: torch.Tensor,
    w_kcc: torch.Tensor,
    nbr: torch.Tensor,
    bias: torch.Tensor | None,
    out: torch.Tensor,
    order: torch.Tensor | None = None,
    allow_tf32: bool = False,
) -> torch.Tensor:
    """Implicit GEMM into ``out`` with a ``[K, Cin, Cout]`` weight (the TensorRT plugin's)."""
    return _launch(features.contiguous(), w_kcc.contiguous(), nbr.contiguous(), bias, out, order, allow_tf32, True)


def conv_compute(
    features: torch.Tensor,
    weight: torch.Tensor,
    nbr: torch.Tensor,
    bias: torch.Tensor | None,
    order: torch.Tensor | None = None,
    allow_tf32: bool = False,
) -> torch.Tensor:
    """Implicit GEMM with spconv's ``[Cout, kD, kH, kW, Cin]`` weight, read in
    place in half precision (no per-call transpose: a copy kernel and an
    allocation). fp32 takes the ``[K, Cin, Cout]`` copy: its FMA path reads the
    in-place layout with a quarter more shared-memory loads, and on the H200
    that made fp32 layers 1.1-1.9x spconv's time against 0.9-1.3x with the
    copy (benchmarks/results/sparse_spconv_h200.md, session 4). The copy is
    made once per weight and reused while the weight is unchanged."""
    dtype = features.dtype
    out = torch.empty((nbr.shape[0], weight.shape[0]), dtype=dtype, device=features.device)
    in_place = dtype != torch.float32
    if in_place:
        forget_weight_kcc(weight)  # after model.half(), the weight object's float32 copy is not kept alive
        weight = weight.to(dtype).contiguous()
    elif weight.dtype == dtype:
        weight = _weight_kcc_reused(weight)
    else:  # a weight of another dtype is a fresh tensor per call: nothing to reuse
        forget_weight_kcc(weight)
        weight = weight_kcc(weight.to(dtype))
    if bias is not None:
        bias = bias.to(dtype).contiguous()
    return _launch(features.contiguous(), weight, nbr.contiguous(), bias, out, order, allow_tf32, not in_place)
