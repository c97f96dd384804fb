"""Triton kernels that build rulebooks on the GPU (CUDA implementations of
the rulebook ops).

A layer at tens of thousands of voxels does only tens of microseconds of GPU
work per step, so what these launchers are built to cut is the number of
launches, allocations and host round trips (benchmarks/profile_sparse.py
measures each step; benchmarks/results/sparse_rulebook_notes.md compares
them with spconv 2.x).

  * Input sites go into a hash table (open addressing, linear probing,
    compare-and-swap inserts, load factor <= 1/4). The result never depends
    on thread timing: each lookup returns the row stored with its key.
  * ``_hash_search_kernel`` probes every (output site, kernel offset) of a
    tile of output rows (an index tensor: SubM, or any given set) and writes
    whole map rows. It can also write each row's neighbour mask, the sort key
    of the row schedule, so no separate pass over the map is needed.
  * ``subm_rulebook``: table (a fill and an insert kernel), the search with
    mask keys, a stable argsort of the keys and its cast to int32; no host
    synchronisation.
  * ``strided_rulebook``: one kernel computes every (input row, offset)'s
    output key, inserts it into a key-only hash table, appends the keys it
    inserted first (and their slots) to a list of unique sites, and sets the
    offset's bit in a mask key kept per slot; the list's length is the one
    host synchronisation. Only those M unique sites are sorted, once, by
    (mask key, site key): the output order is the row schedule, so no second
    sort (an argsort of the masks) is needed and the order returned is the
    identity. A kernel stores each site's rank in its table slot and decodes
    its coordinates; then the map is pushed: each (input row, offset) on the
    stride lattice looks its output up in the same table and writes its map
    entry. No table of the input sites is built. Keys are int32 whenever one
    sample's output grid fits; a batch index that overflows them is flagged
    by the kernel and the build is redone in int64 (then sorted by site key
    and stably by mask key).
  * ``transpose_neighbor_map``: scatter of the inverse-conv rulebook.
  * ``mask_order``: neighbour mask per row, then a stable argsort (for maps
    that did not come out of a search, i.e. the transposed one).

The launchers that build a rulebook take ``mark``, a profiling hook called
with the name of each step as it starts (benchmarks/profile_sparse.py); the
ops pass none.

Imported lazily for the same reason as triton_gemm.py: the interpreter
(``TRITON_INTERPRET=1``) must be on before ``@triton.jit`` runs; the CPU
tests drive these launchers through it.
"""

from __future__ import annotations

import functools
import math
from typing import Callable, Optional

import torch
import triton
import triton.language as tl

from .geometry import Triple, subm_padding
from .triton_launch import unspecialized_jit

_EMPTY = tl.constexpr(-1)  # free hash slot; keys are non-negative
_INT32_MAX_C = tl.constexpr(2**31 - 1)
_INT32_MAX = 2**31 - 1
_INT64_MAX = 2**63 - 1
_BLOCK = 256
_SCRATCH_GROUPS = 32  # see _strided_sites_kernel
# Mask key of a row: its neighbour bitmask while it fits an int32, else the
# neighbour count (the same keys as reference.mask_order).
_MASK_BITS, _MASK_COUNT = 1, 2

Mark = Optional[Callable[[str], None]]


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
    return ((key.to(tl.int64) * 2654435769) & 0xFFFFFFFF) >> shift


@unspecialized_jit
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


@unspecialized_jit
def _hash_search_kernel(
    out_ptr, table_key_ptr, table_row_ptr, nbr_ptr, mask_key_ptr,
    M, cap_mask, shift,
    D, H, W,
    SZ, SY, SX, PZ, PY, PX, DZ, DY, DX,
    KY: tl.constexpr, KX: tl.constexpr, K: tl.constexpr, KP: tl.constexpr,
    MASK_KEY: tl.constexpr, BLOCK_M: tl.constexpr,
):
    """nbr[m, k] = input row at o_m * S - P + k * D (or -1), for BLOCK_M output
    sites (rows of an int32 [M, 4] index tensor) x all kernel offsets per
    program, so each output row's coordinates are read once and its map row is
    stored contiguously. MASK_KEY: also write each row's mask key."""
    m = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    k = tl.arange(0, KP)
    m_ok = m < M
    kz = (k // (KY * KX))[None, :]
    ky = ((k // KX) % KY)[None, :]
    kx = (k % KX)[None, :]
    b = tl.load(out_ptr + m * 4 + 0, mask=m_ok, other=0).to(tl.int64)[:, None]
    z = tl.load(out_ptr + m * 4 + 1, mask=m_ok, other=0).to(tl.int64)[:, None] * SZ - PZ + kz * DZ
    y = tl.load(out_ptr + m * 4 + 2, mask=m_ok, other=0).to(tl.int64)[:, None] * SY - PY + ky * DY
    x = tl.load(out_ptr + m * 4 + 3, mask=m_ok, other=0).to(tl.int64)[:, None] * SX - PX + kx * DX
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
    if MASK_KEY == 1:  # distinct bits: the sum is the OR
        mask_key = tl.sum(tl.where(row >= 0, 1 << k[None, :], 0), axis=1)
        tl.store(mask_key_ptr + m, mask_key.to(tl.int32), mask=m_ok)
    elif MASK_KEY == 2:
        mask_key = tl.sum((row >= 0).to(tl.int32), axis=1)
        tl.store(mask_key_ptr + m, mask_key.to(tl.int32), mask=m_ok)


@triton.jit
def _strided_target(
    idx_ptr, offs, mask, OD, OH, OW, SZ, SY, SX, PZ, PY, PX, DZ, DY, DX,
    KY: tl.constexpr, KX: tl.constexpr, K: tl.constexpr,
):
    """For the pairs offs = n * K + k: input row n, offset k, the row-major key
    of the output site that n reaches through k, and whether it reaches one."""
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
    return n, k, key, valid


@unspecialized_jit
def _strided_sites_kernel(
    idx_ptr, table_ptr, site_mask_ptr, sites_ptr, slots_ptr, status_ptr,
    total, cap_mask, shift, sites_cap,
    OD, OH, OW,
    SZ, SY, SX, PZ, PY, PX, DZ, DY, DX,
    LIMIT,
    KY: tl.constexpr, KX: tl.constexpr, K: tl.constexpr,
    MASK_KEY: tl.constexpr, BLOCK: tl.constexpr, SCRATCH_GROUPS: tl.constexpr,
):
    """The output site that input row n reaches through offset k (for every
    pair n * K + k), inserted into a key-only hash table; the lane whose
    insert created a key appends it to sites[status[0]++] and its table slot
    to slots[] at the same place. Every pair also sets its offset's bit (or
    adds to the count) in the site's mask key, kept per table slot, so the
    mask keys are complete when the kernel is. status[1] is set when a key
    exceeds LIMIT (the table's dtype)."""
    lane = tl.arange(0, BLOCK)
    offs = tl.program_id(0).to(tl.int64) * BLOCK + lane
    n, k, key, valid = _strided_target(idx_ptr, offs, offs < total, OD, OH, OW, SZ, SY, SX, PZ, PY, PX,
                                       DZ, DY, DX, KY, KX, K)
    # A key that does not fit the table's dtype (a batch index beyond what
    # the launcher assumed) is flagged; the launcher then redoes it in int64.
    too_wide = valid & (key > LIMIT)
    tl.store(status_ptr + 1 + tl.zeros([BLOCK], tl.int32), tl.full([BLOCK], 1, tl.int32), mask=too_wide)
    placed = valid & (key <= LIMIT)
    todo = placed
    key = key.to(table_ptr.dtype.element_ty)
    slot = _hash_slot(key, shift)
    # Scratch slots as in _hash_insert_kernel, but most lanes here hold no
    # candidate (off the stride lattice), so programs take turns over
    # SCRATCH_GROUPS blocks of them instead of all hammering the same BLOCK.
    scratch = cap_mask + 1 + (tl.program_id(0) % SCRATCH_GROUPS) * BLOCK + lane
    empty = tl.full([BLOCK], _EMPTY, table_ptr.dtype.element_ty)
    created = tl.zeros([BLOCK], tl.int32)
    at = tl.zeros([BLOCK], tl.int64)  # the slot holding the pair's key
    while tl.max(todo.to(tl.int32), axis=0) > 0:
        target = tl.where(todo, slot, scratch)
        prev = tl.atomic_cas(table_ptr + target, empty, key, sem="relaxed")
        new = todo & (prev == _EMPTY)
        created = tl.where(new, 1, created)
        at = tl.where(todo & ((prev == _EMPTY) | (prev == key)), slot, at)
        todo = todo & (prev != _EMPTY) & (prev != key)
        slot = (slot + 1) & cap_mask
    # Input sites are unique, so each (site, offset) bit has one writer and
    # the OR / count does not depend on timing.
    if MASK_KEY == 1:
        tl.atomic_or(site_mask_ptr + at, (1 << k).to(tl.int32), mask=placed, sem="relaxed")
    else:
        tl.atomic_add(site_mask_ptr + at, tl.full([BLOCK], 1, tl.int32), mask=placed, sem="relaxed")
    # One atomic per program reserves room for its new sites. Their order in
    # the list depends on timing; the launcher sorts the list.
    base = tl.atomic_add(status_ptr, tl.sum(created, axis=0), sem="relaxed")
    pos = base + tl.cumsum(created, axis=0) - created
    keep = (created > 0) & (pos < sites_cap)
    tl.store(sites_ptr + pos, key, mask=keep)
    tl.store(slots_ptr + pos, at.to(tl.int32), mask=keep)


@unspecialized_jit
def _strided_order_key_kernel(sites_ptr, slots_ptr, site_mask_ptr, order_key_ptr, M, BLOCK: tl.constexpr):
    """order_key[i] = (mask key << 31) | site key of the i-th unique site (an
    int32 site key fits 31 bits): one sort of these gives the output order."""
    i = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    ok = i < M
    site = tl.load(sites_ptr + i, mask=ok, other=0).to(tl.int64)
    mask_key = tl.load(site_mask_ptr + tl.load(slots_ptr + i, mask=ok, other=0), mask=ok, other=0).to(tl.int64)
    tl.store(order_key_ptr + i, (mask_key << 31) | site, mask=ok)


@unspecialized_jit
def _strided_number_kernel(sorted_ptr, perm_ptr, slots_ptr, site_row_ptr, out_idx_ptr, M, OD, OH, OW,
                           ORDER_KEY: tl.constexpr, BLOCK: tl.constexpr):
    """Output site m (the m-th in output order): its table slot's value
    becomes m, and its key is decoded into out_idx[m] = (b, z, y, x).
    ORDER_KEY: sorted_ptr holds order keys, whose low 31 bits are the site key."""
    m = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    ok = m < M
    site = tl.load(sorted_ptr + m, mask=ok, other=0).to(tl.int64)
    if ORDER_KEY:
        site = site & _INT32_MAX_C
    slot = tl.load(slots_ptr + tl.load(perm_ptr + m, mask=ok, other=0), mask=ok, other=0)
    tl.store(site_row_ptr + slot, m.to(tl.int32), mask=ok)
    ox = site % OW
    rest = site // OW
    oy = rest % OH
    rest = rest // OH
    tl.store(out_idx_ptr + m * 4 + 0, (rest // OD).to(tl.int32), mask=ok)
    tl.store(out_idx_ptr + m * 4 + 1, (rest % OD).to(tl.int32), mask=ok)
    tl.store(out_idx_ptr + m * 4 + 2, oy.to(tl.int32), mask=ok)
    tl.store(out_idx_ptr + m * 4 + 3, ox.to(tl.int32), mask=ok)


@unspecialized_jit
def _strided_push_kernel(
    idx_ptr, table_ptr, site_row_ptr, nbr_ptr,
    total, cap_mask, shift,
    OD, OH, OW,
    SZ, SY, SX, PZ, PY, PX, DZ, DY, DX,
    KY: tl.constexpr, KX: tl.constexpr, K: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """nbr[o, k] = n for every pair (n, k) that reaches output site o, found
    through the site table (every such key is in it). A push: only the
    ~K / prod(S) pairs on the stride lattice probe the table, where a pull
    over the output sites would probe all K offsets of every site (9x more
    probes for 3x3x3 stride 2)."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    n, k, key, todo = _strided_target(idx_ptr, offs, offs < total, OD, OH, OW, SZ, SY, SX, PZ, PY, PX,
                                      DZ, DY, DX, KY, KX, K)
    key = key.to(table_ptr.dtype.element_ty)
    slot = _hash_slot(key, shift)
    o = tl.full([BLOCK], -1, tl.int32)
    while tl.max(todo.to(tl.int32), axis=0) > 0:
        v = tl.load(table_ptr + slot, mask=todo, other=_EMPTY)
        hit = todo & (v == key)
        o = tl.where(hit, tl.load(site_row_ptr + slot, mask=hit, other=-1), o)
        todo = todo & (v != _EMPTY) & (v != key)
        slot = (slot + 1) & cap_mask
    found = o >= 0
    # Input sites are unique, so each (o, k) has one writer: the map does not depend on timing.
    tl.store(nbr_ptr + o.to(tl.int64) * K + k, n.to(tl.int32), mask=found)


@unspecialized_jit
def _transpose_kernel(nbr_ptr, nbr_t_ptr, total, K: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < total
    i = tl.load(nbr_ptr + offs, mask=mask, other=-1).to(tl.int64)
    m = (offs // K).to(tl.int32)
    k = offs % K
    tl.store(nbr_t_ptr + i * K + k, m, mask=mask & (i >= 0))


@unspecialized_jit
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
    # Not triton.cdiv: on the host that is a constexpr-function call, ~3 us each.
    return (-(-total // block),)


@functools.lru_cache(maxsize=None)
def _row_tiles(K: int) -> tuple[int, int, int]:
    """K padded to a power of two, rows per search / mask-key tile, mask-key kind."""
    kp = triton.next_power_of_2(K)
    return kp, max(1, 1024 // kp), _MASK_BITS if K <= 31 else _MASK_COUNT


@functools.lru_cache(maxsize=None)
def _kernel_shape(kernel_size: Triple) -> tuple[int, int, int, int]:
    """K, K padded to a power of two, rows per search tile, mask-key kind."""
    K = math.prod(kernel_size)
    return (K, *_row_tiles(K))


_subm_padding = functools.lru_cache(maxsize=None)(subm_padding)


@functools.lru_cache(maxsize=None)
def _sites_per_input(kernel_size: Triple, stride: Triple, dilation: Triple) -> int:
    """Most output sites one input site can reach: along an axis, the offsets
    k with (i + P - k * D) divisible by S repeat every S / gcd(S, D) steps."""
    return math.prod(
        min(k, -(-k * math.gcd(s, d) // s)) for k, s, d in zip(kernel_size, stride, dilation)
    )


def _order(mask_key: torch.Tensor) -> torch.Tensor:
    return torch.argsort(mask_key, stable=True).to(torch.int32)


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
    D, H, W = in_spatial_shape
    _hash_insert_kernel[_grid(N)](in_indices, keys, rows, N, cap - 1, 32 - log2cap, D, H, W, BLOCK=_BLOCK)
    return keys, rows, cap - 1, 32 - log2cap


def _search(sites, table, nbr, in_spatial_shape, kernel_size, stride, padding, dilation, mask_key=None) -> None:
    """Fill ``nbr`` for output ``sites`` (an int32 [M, 4] index tensor);
    ``mask_key`` (optional) receives the rows' mask keys."""
    K, kp, block_m, key_kind = _kernel_shape(kernel_size)
    M = nbr.shape[0]
    keys, rows, cap_mask, shift = table
    _hash_search_kernel[_grid(M, block_m)](
        sites, keys, rows, nbr,
        mask_key if mask_key is not None else nbr,  # an unused pointer gets any tensor
        M, cap_mask, shift, *in_spatial_shape, *stride, *padding, *dilation,
        KY=kernel_size[1], KX=kernel_size[2], K=K, KP=kp,
        MASK_KEY=0 if mask_key is None else key_kind, BLOCK_M=block_m,
    )


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
    K = _kernel_shape(kernel_size)[0]
    M, N = out_indices.shape[0], in_indices.shape[0]
    nbr = torch.empty((M, K), dtype=torch.int32, device=out_indices.device)
    if M == 0:
        return nbr
    if N == 0:
        return nbr.fill_(-1)
    in_shape = tuple(int(s) for s in in_spatial_shape)
    table = _hash_table(in_indices.contiguous(), in_shape)
    _search(out_indices.contiguous(), table, nbr, in_shape, kernel_size, stride, padding, dilation)
    return nbr


def subm_rulebook(
    indices: torch.Tensor, spatial_shape, kernel_size: Triple, dilation: Triple, mark: Mark = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Neighbour map and row schedule of a submanifold conv: the same result as
    (reference.neighbor_map, reference.mask_order), in one search pass."""
    K = _kernel_shape(kernel_size)[0]
    N = indices.shape[0]
    device = indices.device
    nbr = torch.empty((N, K), dtype=torch.int32, device=device)
    mask_key = torch.empty((N,), dtype=torch.int32, device=device)
    if N == 0:
        return nbr, mask_key
    indices = indices.contiguous()
    shape = tuple(int(s) for s in spatial_shape)
    if mark:
        mark("hash table")
    table = _hash_table(indices, shape)
    if mark:
        mark("search + mask keys")
    _search(indices, table, nbr, shape, kernel_size, (1, 1, 1), _subm_padding(kernel_size, dilation), dilation,
            mask_key=mask_key)
    if mark:
        mark("order (argsort)")
    return nbr, _order(mask_key)


def strided_rulebook(
    in_indices: torch.Tensor,
    in_spatial_shape,
    out_spatial_shape,
    kernel_size: Triple,
    stride: Triple,
    padding: Triple,
    dilation: Triple,
    mark: Mark = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Output sites, neighbour map and row schedule of a regular sparse conv:
    the same result as reference.strided_rulebook. Sites come out sorted by
    (mask key, site key), so the row schedule is the identity. (``in_spatial_shape``
    is implied by the output grid and the geometry; it is kept so that both
    rulebook launchers read alike.) Input sites must be unique: a duplicated
    site gives a valid map of one of its copies, in an order that may differ
    from the reference's."""
    K, _, _, key_kind = _kernel_shape(kernel_size)
    N = in_indices.shape[0]
    device = in_indices.device
    if N == 0:
        return (torch.empty((0, 4), dtype=torch.int32, device=device),
                torch.empty((0, K), dtype=torch.int32, device=device),
                torch.empty((0,), dtype=torch.int32, device=device))
    in_indices = in_indices.contiguous()
    out_shape = tuple(int(s) for s in out_spatial_shape)
    geometry = (*out_shape, *stride, *padding, *dilation)
    bound = N * _sites_per_input(kernel_size, stride, dilation)
    log2cap = max(4, (2 * bound - 1).bit_length())  # load factor <= 1/2 even if every candidate is distinct
    if log2cap > 31:  # slots are stored as int32
        raise ValueError(f"sparse rulebook: {N} input sites may reach more output sites than a hash table holds")
    cap_mask, shift = (1 << log2cap) - 1, 32 - log2cap
    total = N * K
    slots = torch.empty((bound,), dtype=torch.int32, device=device)
    # int32 keys hold one sample's grid when its volume fits; a larger batch
    # index is caught by the overflow flag and redone in int64.
    narrow = math.prod(out_shape) < _INT32_MAX
    for dtype, limit in ((torch.int32, _INT32_MAX), (torch.int64, _INT64_MAX)):
        if dtype == torch.int32 and not narrow:
            continue
        if mark:
            mark(f"output sites + mask keys ({'int32' if dtype == torch.int32 else 'int64'} keys)")
        site_table = torch.full((cap_mask + 1 + _SCRATCH_GROUPS * _BLOCK,), _EMPTY.value, dtype=dtype, device=device)
        site_mask = torch.zeros((cap_mask + 1,), dtype=torch.int32, device=device)
        sites = torch.empty((bound,), dtype=dtype, device=device)
        status = torch.zeros((2,), dtype=torch.int32, device=device)  # [sites, overflow]
        _strided_sites_kernel[_grid(total)](
            in_indices, site_table, site_mask, sites, slots, status, total, cap_mask, shift, bound, *geometry, limit,
            KY=kernel_size[1], KX=kernel_size[2], K=K, MASK_KEY=key_kind, BLOCK=_BLOCK,
            SCRATCH_GROUPS=_SCRATCH_GROUPS,
        )
        if mark:
            mark("sync: output size")
        M, overflow = status.tolist()  # the one host synchronisation: the output size
        if not overflow:
            break
    if M > bound:
        raise RuntimeError(f"sparse rulebook: {M} output sites exceed the bound {bound}; "
                           "this is a bug in the strided rulebook, please report it")
    nbr = torch.full((M, K), -1, dtype=torch.int32, device=device)
    out_indices = torch.empty((M, 4), dtype=torch.int32, device=device)
    if M:
        order_key = dtype == torch.int32  # site keys fit 31 bits: (mask, site) packs into one int64
        if mark:
            mark("sort output sites by (mask key, site key)")
        if order_key:
            keys = torch.empty((M,), dtype=torch.int64, device=device)
            _strided_order_key_kernel[_grid(M)](sites, slots, site_mask, keys, M, BLOCK=_BLOCK)
            sorted_keys, perm = torch.sort(keys)
        else:  # int64 site keys: by site key, then stably by mask key
            sorted_keys, perm = torch.sort(sites[:M])
            by_mask = torch.argsort(site_mask[slots[perm].long()], stable=True)
            sorted_keys, perm = sorted_keys[by_mask], perm[by_mask]
        if mark:
            mark("number output sites")
        site_row = torch.empty((cap_mask + 1,), dtype=torch.int32, device=device)
        _strided_number_kernel[_grid(M)](sorted_keys, perm, slots, site_row, out_indices, M, *out_shape,
                                         ORDER_KEY=order_key, BLOCK=_BLOCK)
        if mark:
            mark("map (push)")
        _strided_push_kernel[_grid(total)](
            in_indices, site_table, site_row, nbr, total, cap_mask, shift, *geometry,
            KY=kernel_size[1], KX=kernel_size[2], K=K, BLOCK=_BLOCK,
        )
    if mark:
        mark("order (identity)")
    return out_indices, nbr, torch.arange(M, dtype=torch.int32, device=device)


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
        kp, block_m, _ = _row_tiles(K)
        _mask_key_kernel[_grid(M, block_m)](nbr.contiguous(), key, M, K=K, KP=kp, BITS=K <= 31, BLOCK_M=block_m)
    return _order(key)
