"""Device-agnostic torch implementations of the sparse-conv primitives.

These are the CPU kernels of the custom ops and the oracle the Triton
kernels are tested against. Everything is vectorised over voxels: the only
Python loop is over kernel offsets (at most a few hundred), never over sites.

Rulebook format ("neighbour map"): an int32 ``[M, K]`` tensor ``nbr`` where
``nbr[m, k]`` is the row of the input feature matrix that kernel offset ``k``
reads for output site ``m``, or ``-1`` where that input site is inactive.
This pull-style map lets the compute kernel write each output row once, with
no atomics, which also makes it deterministic.
"""

from __future__ import annotations

from typing import Sequence

import torch

from .geometry import Triple, hash_coords, kernel_offsets, unhash_coords


def sort_keys(indices: torch.Tensor, spatial_shape: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Sorted int64 keys of the active sites and the permutation back to rows."""
    keys = hash_coords(indices[:, 0], indices[:, 1:], spatial_shape)
    return torch.sort(keys)


def neighbor_map(
    out_indices: torch.Tensor,
    in_indices: torch.Tensor,
    in_spatial_shape: Sequence[int],
    kernel_size: Triple,
    stride: Triple,
    padding: Triple,
    dilation: Triple,
) -> torch.Tensor:
    """For output site ``o`` and kernel position ``k`` the input site read is
    ``o * stride - padding + k * dilation`` (the dense conv3d relation)."""
    device = out_indices.device
    M = out_indices.shape[0]
    offsets = kernel_offsets(kernel_size, device)
    K = offsets.shape[0]
    if M == 0 or in_indices.shape[0] == 0:
        return torch.full((M, K), -1, dtype=torch.int32, device=device)

    sorted_keys, perm = sort_keys(in_indices, in_spatial_shape)
    st = torch.tensor(stride, device=device)
    pad = torch.tensor(padding, device=device)
    dil = torch.tensor(dilation, device=device)
    shape = torch.tensor(list(in_spatial_shape), device=device)

    pos = out_indices[:, None, 1:].long() * st - pad + offsets[None] * dil  # [M, K, 3]
    in_bounds = ((pos >= 0) & (pos < shape)).all(dim=-1)
    keys = hash_coords(out_indices[:, None, 0], pos, in_spatial_shape).contiguous()
    loc = torch.searchsorted(sorted_keys, keys).clamp_(max=sorted_keys.shape[0] - 1)
    found = in_bounds & (sorted_keys[loc] == keys)
    return torch.where(found, perm[loc], -1).to(torch.int32)


def _strided_pairs(in_indices, out_spatial_shape, kernel_size, stride, padding, dilation):
    """Output-site key of every (input row, kernel offset) pair, and which pairs land on a valid output site.

    One axis at a time with Python-int geometry: no [N, K, 3] int64 temporaries, and no host-to-device copies
    of the geometry (each of those synchronises the CUDA stream).
    """
    offsets = kernel_offsets(kernel_size, in_indices.device)
    key = in_indices[:, :1].long()  # [N, 1], batch
    ok = None
    for axis in range(3):
        num = in_indices[:, axis + 1, None].long() + padding[axis] - offsets[None, :, axis] * dilation[axis]
        out = torch.div(num, stride[axis], rounding_mode="floor")
        valid = (num >= 0) & (out * stride[axis] == num) & (out < out_spatial_shape[axis])
        ok = valid if ok is None else ok & valid
        key = key * int(out_spatial_shape[axis]) + out  # same key as hash_coords
    return key, ok


def strided_out_indices(
    in_indices: torch.Tensor,
    out_spatial_shape: Sequence[int],
    kernel_size: Triple,
    stride: Triple,
    padding: Triple,
    dilation: Triple,
) -> torch.Tensor:
    """Active output sites of a regular (strided) sparse conv: every output
    whose receptive field holds at least one active input. Sorted by key,
    so the output order is deterministic and spatially coherent."""
    if in_indices.shape[0] == 0:
        return torch.empty((0, 4), dtype=torch.int32, device=in_indices.device)
    key, ok = _strided_pairs(in_indices, out_spatial_shape, kernel_size, stride, padding, dilation)
    return unhash_coords(torch.unique(key[ok]), out_spatial_shape)


def strided_rulebook(
    in_indices: torch.Tensor,
    out_spatial_shape: Sequence[int],
    kernel_size: Triple,
    stride: Triple,
    padding: Triple,
    dilation: Triple,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Output sites and neighbour map of a strided conv in one pass.

    Every valid (input row, kernel offset) pair names its output site; ``unique(return_inverse=True)`` numbers
    the sites (sorted by key, as ``strided_out_indices``), and since input and output sites pair one to one
    for a fixed offset, a single scatter fills the map. No second hash-and-search over [M, K] sites.

    The sites are then put in row-schedule order: sorted by mask key (``mask_order``), ties by site key. So
    ``mask_order`` of the result is the identity, and the GPU builds this order with one sort of
    (mask key, site key) instead of a sort of the sites and a second one of their masks.
    """
    device = in_indices.device
    K = kernel_size[0] * kernel_size[1] * kernel_size[2]
    if in_indices.shape[0] == 0:
        return (torch.empty((0, 4), dtype=torch.int32, device=device),
                torch.empty((0, K), dtype=torch.int32, device=device))
    key, ok = _strided_pairs(in_indices, out_spatial_shape, kernel_size, stride, padding, dilation)
    rows, offs = ok.nonzero(as_tuple=True)  # row-major, the order of key[ok]
    sites, site_of_pair = torch.unique(key[rows, offs], return_inverse=True)
    nbr = torch.full((sites.shape[0], K), -1, dtype=torch.int32, device=device)
    nbr[site_of_pair, offs] = rows.to(torch.int32)
    order = mask_order(nbr).long()
    return unhash_coords(sites[order], out_spatial_shape), nbr[order]


def transpose_neighbor_map(nbr: torch.Tensor, num_in: int) -> torch.Tensor:
    """Rulebook of the inverse conv: ``nbr_t[i, k] = m`` iff ``nbr[m, k] = i``.
    Exact because, for a fixed offset, input and output sites pair one to one."""
    M, K = nbr.shape
    nbr_t = torch.full((num_in, K), -1, dtype=torch.int32, device=nbr.device)
    m, k = (nbr >= 0).nonzero(as_tuple=True)
    nbr_t[nbr[m, k].long(), k] = m.to(torch.int32)
    return nbr_t


def mask_order(nbr: torch.Tensor) -> torch.Tensor:
    """int32 permutation of the rulebook's rows sorted (stably) by their
    neighbour bitmask, so the compute kernel's row tiles share active offsets
    (spconv sorts its masks for the same reason). Kernels with more than 31
    offsets sort by the number of active offsets instead: the key stays int32,
    which keeps the GPU sort at four radix passes."""
    M, K = nbr.shape
    active = (nbr >= 0).to(torch.int32)
    if K <= 31:
        key = (active << torch.arange(K, device=nbr.device, dtype=torch.int32)).sum(dim=1, dtype=torch.int32)
    else:
        key = active.sum(dim=1, dtype=torch.int32)
    return torch.argsort(key, stable=True).to(torch.int32)


def conv_compute(
    features: torch.Tensor,
    weight: torch.Tensor,
    nbr: torch.Tensor,
    bias: torch.Tensor | None,
) -> torch.Tensor:
    """Gather–GEMM–scatter per kernel offset, accumulating in fp32.

    ``weight`` is spconv's layout ``[Cout, kD, kH, kW, Cin]``.
    """
    M, K = nbr.shape
    c_out, c_in = weight.shape[0], weight.shape[-1]
    w = weight.reshape(c_out, K, c_in).float()
    feats = features.float()
    out = torch.zeros((M, c_out), dtype=torch.float32, device=features.device)
    for k in range(K):
        rows = (nbr[:, k] >= 0).nonzero().squeeze(1)
        if rows.numel() == 0:
            continue
        gathered = feats[nbr[rows, k].long()]
        out.index_add_(0, rows, gathered @ w[:, k, :].t())
    if bias is not None:
        out += bias.float()
    return out.to(features.dtype)
