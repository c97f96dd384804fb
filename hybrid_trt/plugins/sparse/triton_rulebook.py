"""Triton kernels that build rulebooks on the GPU (CUDA implementations of
the rulebook ops).

A layer at tens of thousands of voxels does only tens of microseconds of GPU
work per step, so what these launchers are built to cut is the number of
launches and host round trips: each step is one fused kernel, and the strided
rulebook has a single host synchronisation (its output size).

  * ``neighbor_search``: hash table of the input sites (open addressing,
    linear probing, built with compare-and-swap), then one probe per (output
    site, kernel offset). No sort; the result does not depend on thread
    timing, because each lookup returns the row stored with its key.
  * ``strided_rulebook``: candidate output key per (input row, offset), one
    radix sort of the candidates (invalid ones carry a sentinel that sorts
    last), run heads numbered by a prefix sum, one scatter kernel writing
    output coordinates and the neighbour map. Output sites come out sorted by
    key, the same order as the torch reference. Keys are int32 whenever they
    fit, which halves the sort.
  * ``transpose_neighbor_map``: scatter of the inverse-conv rulebook.
  * ``mask_order``: neighbour bitmask per row, then a stable argsort.

Imported lazily for the same reason as triton_gemm.py: the interpreter
(``TRITON_INTERPRET=1``) must be on before ``@triton.jit`` runs; the CPU
tests drive these launchers through it.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .geometry import Triple

_EMPTY = tl.constexpr(-1)  # free hash slot; keys are non-negative
_INT32_MAX = 2**31 - 1
_INT64_MAX = 2**63 - 1
_BLOCK = 256


@triton.jit
def _site_key(idx_ptr, row, mask, D, H, W):
    """Row-major key of the (b, z, y, x) row ``row`` of an int32 [N, 4] index
    tensor; the same key as geometry.hash_coords."""
    b = tl.load(idx_ptr + row * 4 + 0, mask=mask, other=0).to(tl.int64)
    z = tl.load(idx_ptr + row * 4 + 1, mask=mask, other=0).to(tl.int64)
    y = tl.load(idx_ptr + row * 4 + 2, mask=mask, other=0).to(tl.int64)
    x = tl.load(idx_ptr + row * 4 + 3, mask=mask, other=0).to(tl.int64)
    return ((b * D + z) * H + y) * W + x


@triton.jit
def _hash_slot(key, shift):
    # Fibonacci hashing: the top bits of (key * 2^32 / phi) mod 2^32. Row-major
    # keys of neighbours differ in their low bits, which this spreads out.
    return ((key * 2654435769) & 0xFFFFFFFF) >> shift


@triton.jit
def _hash_insert_kernel(
    idx_ptr, table_key_ptr, table_row_ptr,
    N, cap_mask, shift, D, H, W,
    BLOCK: tl.constexpr,
):
    lane = tl.arange(0, BLOCK)
    n = tl.program_id(0).to(tl.int64) * BLOCK + lane
    todo = n < N
    key = _site_key(idx_ptr, n, todo, D, H, W)
    slot = _hash_slot(key, shift)
    # atomic_cas takes no mask: lanes that are done (or past N) aim at a
    # private scratch slot behind the table instead.
    scratch = cap_mask + 1 + lane
    empty = tl.full([BLOCK], _EMPTY, tl.int64)
    while tl.max(todo.to(tl.int32), axis=0) > 0:
        target = tl.where(todo, slot, scratch)
        prev = tl.atomic_cas(table_key_ptr + target, empty, key, sem="relaxed")  # rows are read by a later kernel
        won = todo & (prev == _EMPTY)
        tl.store(table_row_ptr + slot, n.to(tl.int32), mask=won)
        # A duplicate site (prev == key) keeps the row stored first.
        todo = todo & (prev != _EMPTY) & (prev != key)
        slot = (slot + 1) & cap_mask


@triton.jit
def _hash_search_kernel(
    out_idx_ptr, table_key_ptr, table_row_ptr, nbr_ptr,
    M, cap_mask, shift,
    D, H, W,
    SZ, SY, SX, PZ, PY, PX, DZ, DY, DX,
    KY: tl.constexpr, KX: tl.constexpr, K: tl.constexpr, KP: tl.constexpr,
    BLOCK_M: tl.constexpr,
):
    # One tile = BLOCK_M output sites x all kernel offsets, so each output
    # row's coordinates are loaded once and its map row is stored contiguously.
    m = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    k = tl.arange(0, KP)
    m_ok = m < M
    kz = (k // (KY * KX))[None, :]
    ky = ((k // KX) % KY)[None, :]
    kx = (k % KX)[None, :]
    b = tl.load(out_idx_ptr + m * 4 + 0, mask=m_ok, other=0).to(tl.int64)[:, None]
    z = tl.load(out_idx_ptr + m * 4 + 1, mask=m_ok, other=0).to(tl.int64)[:, None] * SZ - PZ + kz * DZ
    y = tl.load(out_idx_ptr + m * 4 + 2, mask=m_ok, other=0).to(tl.int64)[:, None] * SY - PY + ky * DY
    x = tl.load(out_idx_ptr + m * 4 + 3, mask=m_ok, other=0).to(tl.int64)[:, None] * SX - PX + kx * DX
    store_ok = m_ok[:, None] & (k < K)[None, :]
    todo = store_ok & (z >= 0) & (z < D) & (y >= 0) & (y < H) & (x >= 0) & (x < W)
    key = ((b * D + z) * H + y) * W + x
    slot = _hash_slot(key, shift)
    row = tl.full([BLOCK_M, KP], -1, tl.int32)
    while tl.max(tl.max(todo.to(tl.int32), axis=1), axis=0) > 0:
        v = tl.load(table_key_ptr + slot, mask=todo, other=_EMPTY)
        hit = todo & (v == key)
        row = tl.where(hit, tl.load(table_row_ptr + slot, mask=hit, other=-1), row)
        todo = todo & (v != _EMPTY) & (v != key)
        slot = (slot + 1) & cap_mask
    tl.store(nbr_ptr + m[:, None] * K + k[None, :], row, mask=store_ok)


@triton.jit
def _strided_candidates_kernel(
    idx_ptr, key_ptr, overflow_ptr,
    total, OD, OH, OW,
    SZ, SY, SX, PZ, PY, PX, DZ, DY, DX,
    SENTINEL,
    KY: tl.constexpr, KX: tl.constexpr, K: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """key[n * K + k] = output site that input row n reaches through offset k,
    or SENTINEL where it reaches none (off the stride lattice or the grid)."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < total
    n = offs // K
    k = offs % K
    kz = k // (KY * KX)
    ky = (k // KX) % KY
    kx = k % KX
    b = tl.load(idx_ptr + n * 4 + 0, mask=mask, other=0).to(tl.int64)
    # Output o reads input o * S - P + k * D, so o = (i + P - k * D) / S when exact.
    nz = tl.load(idx_ptr + n * 4 + 1, mask=mask, other=0).to(tl.int64) + PZ - kz * DZ
    ny = tl.load(idx_ptr + n * 4 + 2, mask=mask, other=0).to(tl.int64) + PY - ky * DY
    nx = tl.load(idx_ptr + n * 4 + 3, mask=mask, other=0).to(tl.int64) + PX - kx * DX
    # Division is only trusted where the numerator is non-negative.
    oz = tl.maximum(nz, 0) // SZ
    oy = tl.maximum(ny, 0) // SY
    ox = tl.maximum(nx, 0) // SX
    valid = (mask & (nz >= 0) & (ny >= 0) & (nx >= 0)
             & (oz * SZ == nz) & (oy * SY == ny) & (ox * SX == nx)
             & (oz < OD) & (oy < OH) & (ox < OW))
    key = ((b * OD + oz) * OH + oy) * OW + ox
    # A key that does not fit the narrow dtype (a batch index beyond what the
    # launcher assumed) is flagged; the launcher then redoes it in int64.
    tl.store(overflow_ptr + tl.zeros([BLOCK], tl.int32), tl.full([BLOCK], 1, tl.int32), mask=valid & (key >= SENTINEL))
    tl.store(key_ptr + offs, tl.where(valid, key, SENTINEL).to(key_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _run_heads_kernel(skey_ptr, head_ptr, total, SENTINEL, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < total
    s = tl.load(skey_ptr + offs, mask=mask, other=SENTINEL)
    prev = tl.load(skey_ptr + offs - 1, mask=mask & (offs > 0), other=-1)
    head = (s != SENTINEL) & (s != prev)
    tl.store(head_ptr + offs, head.to(tl.int32), mask=mask)


@triton.jit
def _strided_fill_kernel(
    skey_ptr, pair_ptr, site_ptr, nbr_ptr, out_idx_ptr,
    total, OD, OH, OW, SENTINEL,
    K: tl.constexpr, BLOCK: tl.constexpr,
):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < total
    s = tl.load(skey_ptr + offs, mask=mask, other=SENTINEL)
    valid = mask & (s != SENTINEL)
    site = tl.load(site_ptr + offs, mask=valid, other=1).to(tl.int64) - 1  # inclusive prefix sum of heads
    pair = tl.load(pair_ptr + offs, mask=valid, other=0)
    tl.store(nbr_ptr + site * K + pair % K, (pair // K).to(tl.int32), mask=valid)
    prev = tl.load(skey_ptr + offs - 1, mask=valid & (offs > 0), other=-1)
    head = valid & (s != prev)
    key = s.to(tl.int64)
    x = key % OW
    rest = key // OW
    y = rest % OH
    rest = rest // OH
    z = rest % OD
    b = rest // OD
    tl.store(out_idx_ptr + site * 4 + 0, b.to(tl.int32), mask=head)
    tl.store(out_idx_ptr + site * 4 + 1, z.to(tl.int32), mask=head)
    tl.store(out_idx_ptr + site * 4 + 2, y.to(tl.int32), mask=head)
    tl.store(out_idx_ptr + site * 4 + 3, x.to(tl.int32), mask=head)


@triton.jit
def _transpose_kernel(nbr_ptr, nbr_t_ptr, total, K: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < total
    i = tl.load(nbr_ptr + offs, mask=mask, other=-1).to(tl.int64)
    m = (offs // K).to(tl.int32)
    k = offs % K
    tl.store(nbr_t_ptr + i * K + k, m, mask=mask & (i >= 0))


@triton.jit
def _mask_key_kernel(nbr_ptr, key_ptr, M, K: tl.constexpr, KP: tl.constexpr, BITS: tl.constexpr, BLOCK_M: tl.constexpr):
    m = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    k = tl.arange(0, KP)
    ok = (m < M)[:, None] & (k < K)[None, :]
    active = tl.load(nbr_ptr + m[:, None] * K + k[None, :], mask=ok, other=-1) >= 0
    if BITS:
        key = tl.sum(tl.where(active, 1 << k[None, :], 0), axis=1)  # distinct bits: the sum is the OR
    else:
        key = tl.sum(active.to(tl.int32), axis=1)
    tl.store(key_ptr + m, key.to(tl.int32), mask=m < M)


def _grid(total: int, block: int = _BLOCK) -> tuple[int]:
    return (triton.cdiv(total, block),)


def _hash_table(in_indices: torch.Tensor, in_spatial_shape) -> tuple[torch.Tensor, torch.Tensor, int, int]:
    """Open-addressing table of the input sites at load factor <= 1/4 (short
    probe chains; 12 bytes a slot), plus one scratch slot per lane."""
    N = in_indices.shape[0]
    log2cap = max(4, (4 * N - 1).bit_length())
    if log2cap > 32:
        raise ValueError(f"sparse rulebook: {N} input sites exceed the hash table's 2^30 capacity")
    cap = 1 << log2cap
    keys = torch.full((cap + _BLOCK,), _EMPTY.value, dtype=torch.int64, device=in_indices.device)
    rows = torch.empty((cap,), dtype=torch.int32, device=in_indices.device)
    D, H, W = (int(s) for s in in_spatial_shape)
    _hash_insert_kernel[_grid(N)](in_indices, keys, rows, N, cap - 1, 32 - log2cap, D, H, W, BLOCK=_BLOCK)
    return keys, rows, cap - 1, 32 - log2cap


def neighbor_search(
    out_indices: torch.Tensor,
    in_indices: torch.Tensor,
    in_spatial_shape,
    kernel_size: Triple,
    stride: Triple,
    padding: Triple,
    dilation: Triple,
) -> torch.Tensor:
    """Same result as reference.neighbor_map (input sites must be unique)."""
    K = kernel_size[0] * kernel_size[1] * kernel_size[2]
    M, N = out_indices.shape[0], in_indices.shape[0]
    nbr = torch.empty((M, K), dtype=torch.int32, device=out_indices.device)
    if M == 0:
        return nbr
    if N == 0:
        return nbr.fill_(-1)
    in_indices, out_indices = in_indices.contiguous(), out_indices.contiguous()
    keys, rows, cap_mask, shift = _hash_table(in_indices, in_spatial_shape)
    kp = triton.next_power_of_2(K)
    block_m = max(1, 1024 // kp)
    D, H, W = (int(s) for s in in_spatial_shape)
    _hash_search_kernel[_grid(M, block_m)](
        out_indices, keys, rows, nbr, M, cap_mask, shift, D, H, W,
        *stride, *padding, *dilation,
        KY=kernel_size[1], KX=kernel_size[2], K=K, KP=kp, BLOCK_M=block_m,
    )
    return nbr


def strided_rulebook(
    in_indices: torch.Tensor,
    out_spatial_shape,
    kernel_size: Triple,
    stride: Triple,
    padding: Triple,
    dilation: Triple,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Same result as reference.strided_rulebook: output sites sorted by key."""
    K = kernel_size[0] * kernel_size[1] * kernel_size[2]
    N = in_indices.shape[0]
    device = in_indices.device
    if N == 0:
        return (torch.empty((0, 4), dtype=torch.int32, device=device),
                torch.empty((0, K), dtype=torch.int32, device=device))
    in_indices = in_indices.contiguous()
    OD, OH, OW = (int(s) for s in out_spatial_shape)
    # int32 keys hold one sample's grid when its volume fits; a larger batch
    # index is caught by the overflow flag and redone in int64.
    narrow = OD * OH * OW < _INT32_MAX
    for dtype, sentinel in ((torch.int32, _INT32_MAX), (torch.int64, _INT64_MAX)):
        if dtype == torch.int32 and not narrow:
            continue
        total = N * K
        keys = torch.empty((total,), dtype=dtype, device=device)
        status = torch.zeros((2,), dtype=torch.int32, device=device)  # [sites, overflow]
        _strided_candidates_kernel[_grid(total)](
            in_indices, keys, status[1:], total, OD, OH, OW,
            *stride, *padding, *dilation, sentinel,
            KY=kernel_size[1], KX=kernel_size[2], K=K, BLOCK=_BLOCK,
        )
        skeys, pairs = torch.sort(keys)
        heads = torch.empty((total,), dtype=torch.int32, device=device)
        _run_heads_kernel[_grid(total)](skeys, heads, total, sentinel, BLOCK=_BLOCK)
        site = torch.cumsum(heads, 0, dtype=torch.int32)
        status[0] = site[-1]
        M, overflow = status.tolist()  # the one host synchronisation: the output size
        if not overflow:
            break
    nbr = torch.full((M, K), -1, dtype=torch.int32, device=device)
    out_indices = torch.empty((M, 4), dtype=torch.int32, device=device)
    _strided_fill_kernel[_grid(total)](
        skeys, pairs, site, nbr, out_indices, total, OD, OH, OW, sentinel, K=K, BLOCK=_BLOCK,
    )
    return out_indices, nbr


def transpose_neighbor_map(nbr: torch.Tensor, num_in: int) -> torch.Tensor:
    M, K = nbr.shape
    nbr_t = torch.full((num_in, K), -1, dtype=torch.int32, device=nbr.device)
    total = M * K
    if total == 0 or num_in == 0:
        return nbr_t
    _transpose_kernel[_grid(total)](nbr.contiguous(), nbr_t, total, K=K, BLOCK=_BLOCK)
    return nbr_t


def mask_order(nbr: torch.Tensor) -> torch.Tensor:
    """Same result as reference.mask_order."""
    M, K = nbr.shape
    key = torch.empty((M,), dtype=torch.int32, device=nbr.device)
    if M:
        kp = triton.next_power_of_2(K)
        block_m = max(1, 1024 // kp)
        _mask_key_kernel[_grid(M, block_m)](nbr.contiguous(), key, M, K=K, KP=kp, BITS=K <= 31, BLOCK_M=block_m)
    return torch.argsort(key, stable=True).to(torch.int32)
