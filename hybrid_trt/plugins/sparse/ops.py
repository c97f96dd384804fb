"""``torch.library`` custom ops for 3D sparse convolution (namespace
``hybrid_trt``).

Each op has a torch implementation (CPU, and any device as fallback), a
Triton implementation registered for CUDA, and a fake implementation so
Dynamo captures models without graph breaks. The strided rulebook is the one
op whose output size depends on the data; its fake returns an unbacked size.

Schemas (``K = kD * kH * kW``):

  sparse_rulebook_subm(Tensor indices, int[] spatial_shape, int[] kernel_size,
                       int[] dilation) -> Tensor nbr                 # [N, K]
  sparse_rulebook_strided(Tensor indices, int[] spatial_shape,
                          int[] kernel_size, int[] stride, int[] padding,
                          int[] dilation) -> (Tensor out_indices,    # [M, 4]
                                              Tensor nbr)            # [M, K]
  sparse_rulebook_transpose(Tensor nbr, SymInt num_in) -> Tensor     # [num_in, K]
  sparse_rulebook_order(Tensor nbr) -> Tensor                        # [M]
  sparse_conv_compute(Tensor features, Tensor weight, Tensor nbr,
                      Tensor? bias, Tensor? order=None) -> Tensor    # [M, Cout]
"""

from __future__ import annotations

import logging
import os
from typing import Optional

import torch

from . import reference
from .geometry import conv_output_shape, subm_padding, triple

log = logging.getLogger("hybrid_trt")

# Escape hatch for debugging a suspected kernel bug on a GPU machine.
_FORCE_TORCH = os.environ.get("HYBRID_TRT_SPARSE_TORCH_ONLY", "0") == "1"


def _rulebook_kernels():
    from . import triton_rulebook

    return triton_rulebook


def _gemm_kernels():
    from . import triton_gemm

    return triton_gemm


def _check_indices(indices: torch.Tensor, op: str) -> None:
    if indices.dim() != 2 or indices.shape[1] != 4:
        raise ValueError(
            f"{op}: indices must be [N, 4] rows of (batch, z, y, x), got shape {tuple(indices.shape)}"
        )
    if indices.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"{op}: indices must be int32 (spconv convention), got {indices.dtype}")


def _check_geometry(spatial_shape, kernel_size, stride, padding, dilation, op: str) -> None:
    for name, value in (
        ("spatial_shape", spatial_shape),
        ("kernel_size", kernel_size),
        ("stride", stride),
        ("padding", padding),
        ("dilation", dilation),
    ):
        if len(value) != 3:
            raise ValueError(f"{op}: {name} must have 3 entries (z, y, x), got {list(value)}")
    if min(kernel_size) <= 0 or min(stride) <= 0 or min(dilation) <= 0 or min(spatial_shape) <= 0:
        raise ValueError(f"{op}: spatial_shape, kernel_size, stride and dilation must be positive")
    if min(padding) < 0:
        raise ValueError(f"{op}: padding must be non-negative, got {list(padding)}")


# --------------------------------------------------------------------------
# sparse_rulebook_subm
# --------------------------------------------------------------------------


@torch.library.custom_op("hybrid_trt::sparse_rulebook_subm", mutates_args=())
def sparse_rulebook_subm(
    indices: torch.Tensor,
    spatial_shape: list[int],
    kernel_size: list[int],
    dilation: list[int],
) -> torch.Tensor:
    """Neighbour map of a submanifold conv: outputs are the input sites."""
    ks, dil = triple(kernel_size, "kernel_size"), triple(dilation, "dilation")
    _check_indices(indices, "sparse_rulebook_subm")
    _check_geometry(spatial_shape, ks, (1, 1, 1), (0, 0, 0), dil, "sparse_rulebook_subm")
    return reference.neighbor_map(indices, indices, spatial_shape, ks, (1, 1, 1), subm_padding(ks, dil), dil)


@sparse_rulebook_subm.register_kernel("cuda")
def _(indices, spatial_shape, kernel_size, dilation):
    ks, dil = triple(kernel_size, "kernel_size"), triple(dilation, "dilation")
    _check_indices(indices, "sparse_rulebook_subm")
    _check_geometry(spatial_shape, ks, (1, 1, 1), (0, 0, 0), dil, "sparse_rulebook_subm")
    if _FORCE_TORCH:
        return reference.neighbor_map(indices, indices, spatial_shape, ks, (1, 1, 1), subm_padding(ks, dil), dil)
    return _rulebook_kernels().neighbor_search(
        indices, indices, spatial_shape, ks, (1, 1, 1), subm_padding(ks, dil), dil
    )


@sparse_rulebook_subm.register_fake
def _(indices, spatial_shape, kernel_size, dilation):
    K = kernel_size[0] * kernel_size[1] * kernel_size[2]
    return indices.new_empty((indices.shape[0], K), dtype=torch.int32)


# --------------------------------------------------------------------------
# sparse_rulebook_strided
# --------------------------------------------------------------------------


def _strided_geometry(indices, spatial_shape, kernel_size, stride, padding, dilation):
    ks, st = triple(kernel_size, "kernel_size"), triple(stride, "stride")
    pad, dil = triple(padding, "padding"), triple(dilation, "dilation")
    _check_indices(indices, "sparse_rulebook_strided")
    _check_geometry(spatial_shape, ks, st, pad, dil, "sparse_rulebook_strided")
    return conv_output_shape(spatial_shape, ks, st, pad, dil), ks, st, pad, dil


@torch.library.custom_op("hybrid_trt::sparse_rulebook_strided", mutates_args=())
def sparse_rulebook_strided(
    indices: torch.Tensor,
    spatial_shape: list[int],
    kernel_size: list[int],
    stride: list[int],
    padding: list[int],
    dilation: list[int],
) -> tuple[torch.Tensor, torch.Tensor]:
    """Output sites (sorted by (b, z, y, x)) and neighbour map of a regular
    sparse conv. The number of output sites depends on the data."""
    geometry = _strided_geometry(indices, spatial_shape, kernel_size, stride, padding, dilation)
    return reference.strided_rulebook(indices, *geometry)


@sparse_rulebook_strided.register_kernel("cuda")
def _(indices, spatial_shape, kernel_size, stride, padding, dilation):
    geometry = _strided_geometry(indices, spatial_shape, kernel_size, stride, padding, dilation)
    if _FORCE_TORCH:
        return reference.strided_rulebook(indices, *geometry)
    return _rulebook_kernels().strided_rulebook(indices, *geometry)


@sparse_rulebook_strided.register_fake
def _(indices, spatial_shape, kernel_size, stride, padding, dilation):
    K = kernel_size[0] * kernel_size[1] * kernel_size[2]
    num_out = torch.library.get_ctx().new_dynamic_size()
    return (
        indices.new_empty((num_out, 4), dtype=torch.int32),
        indices.new_empty((num_out, K), dtype=torch.int32),
    )


# --------------------------------------------------------------------------
# sparse_rulebook_transpose
# --------------------------------------------------------------------------


@torch.library.custom_op("hybrid_trt::sparse_rulebook_transpose", mutates_args=())
def sparse_rulebook_transpose(nbr: torch.Tensor, num_in: int) -> torch.Tensor:
    """Neighbour map of the inverse conv of the conv that produced ``nbr``."""
    return reference.transpose_neighbor_map(nbr, num_in)


@sparse_rulebook_transpose.register_kernel("cuda")
def _(nbr, num_in):
    if _FORCE_TORCH:
        return reference.transpose_neighbor_map(nbr, num_in)
    return _rulebook_kernels().transpose_neighbor_map(nbr, num_in)


@sparse_rulebook_transpose.register_fake
def _(nbr, num_in):
    return nbr.new_empty((num_in, nbr.shape[1]), dtype=torch.int32)


# --------------------------------------------------------------------------
# sparse_rulebook_order
# --------------------------------------------------------------------------


@torch.library.custom_op("hybrid_trt::sparse_rulebook_order", mutates_args=())
def sparse_rulebook_order(nbr: torch.Tensor) -> torch.Tensor:
    """Row schedule for the compute kernel (rows grouped by neighbour mask).
    Computed once per rulebook and cached with it; any permutation of
    ``range(M)`` gives the same result."""
    return reference.mask_order(nbr)


@sparse_rulebook_order.register_kernel("cuda")
def _(nbr):
    if _FORCE_TORCH:
        return reference.mask_order(nbr)
    return _rulebook_kernels().mask_order(nbr)


@sparse_rulebook_order.register_fake
def _(nbr):
    return nbr.new_empty((nbr.shape[0],), dtype=torch.int32)


# --------------------------------------------------------------------------
# sparse_conv_compute
# --------------------------------------------------------------------------


def _check_compute(features, weight, nbr, bias, order=None):
    if order is not None and (order.dim() != 1 or order.shape[0] != nbr.shape[0] or order.dtype != torch.int32):
        raise ValueError(
            f"sparse_conv_compute: order must be an int32 permutation of the {nbr.shape[0]} rulebook rows, "
            f"got {order.dtype} of shape {tuple(order.shape)}; build it with sparse_rulebook_order(nbr)"
        )
    if features.dim() != 2:
        raise ValueError(f"sparse_conv_compute: features must be [N, Cin], got {tuple(features.shape)}")
    if weight.dim() != 5:
        raise ValueError(
            "sparse_conv_compute: weight must be [Cout, kD, kH, kW, Cin] (spconv layout), "
            f"got shape {tuple(weight.shape)}"
        )
    if weight.shape[-1] != features.shape[1]:
        raise ValueError(
            f"sparse_conv_compute: features have {features.shape[1]} channels but the weight "
            f"expects {weight.shape[-1]} input channels"
        )
    k = weight.shape[1] * weight.shape[2] * weight.shape[3]
    if nbr.dim() != 2 or nbr.shape[1] != k:
        raise ValueError(
            f"sparse_conv_compute: rulebook shape {tuple(nbr.shape)} does not match a kernel of "
            f"{k} offsets; was the indice_key reused with a different kernel_size?"
        )
    if bias is not None and bias.shape != (weight.shape[0],):
        raise ValueError(f"sparse_conv_compute: bias must be [Cout={weight.shape[0]}], got {tuple(bias.shape)}")


@torch.library.custom_op("hybrid_trt::sparse_conv_compute", mutates_args=())
def sparse_conv_compute(
    features: torch.Tensor,
    weight: torch.Tensor,
    nbr: torch.Tensor,
    bias: Optional[torch.Tensor],
    order: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """``out[m] = bias + sum_k W[:, k, :] @ features[nbr[m, k]]`` over the
    offsets with ``nbr[m, k] >= 0``; weight layout ``[Cout, kD, kH, kW, Cin]``.
    ``order`` (from sparse_rulebook_order) only schedules the GPU kernel."""
    _check_compute(features, weight, nbr, bias, order)
    return reference.conv_compute(features, weight, nbr, bias)


@sparse_conv_compute.register_kernel("cuda")
def _(features, weight, nbr, bias, order=None):
    _check_compute(features, weight, nbr, bias, order)
    if _FORCE_TORCH:
        return reference.conv_compute(features, weight, nbr, bias)
    return _gemm_kernels().conv_compute(features, weight, nbr, bias, order)


@sparse_conv_compute.register_fake
def _(features, weight, nbr, bias, order=None):
    return features.new_empty((nbr.shape[0], weight.shape[0]))


OPS = (
    sparse_rulebook_subm,
    sparse_rulebook_strided,
    sparse_rulebook_transpose,
    sparse_rulebook_order,
    sparse_conv_compute,
)
