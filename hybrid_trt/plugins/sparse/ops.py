"""Custom ops for 3D sparse convolution (namespace ``hybrid_trt``).

Each op has a torch implementation (CPU, and any device as fallback), a
Triton implementation registered for CUDA, and a fake implementation so
Dynamo captures models without graph breaks. The strided rulebook is the one
op whose output size depends on the data; its fake returns an unbacked size.

Schemas (``K = kD * kH * kW``):

  sparse_rulebook_subm(Tensor indices, int[] spatial_shape, int[] kernel_size,
                       int[] dilation) -> Tensor nbr                 # [N, K]
  sparse_rulebook_subm_ordered(Tensor indices, int[] spatial_shape,
                               int[] kernel_size, int[] dilation)
                               -> (Tensor nbr, Tensor order)         # [N, K], [N]
  sparse_rulebook_strided(Tensor indices, int[] spatial_shape,
                          int[] kernel_size, int[] stride, int[] padding,
                          int[] dilation) -> (Tensor out_indices,    # [M, 4]
                                              Tensor nbr,            # [M, K]
                                              Tensor order)          # [M]
  sparse_rulebook_transpose(Tensor nbr, SymInt num_in) -> Tensor     # [num_in, K]
  sparse_rulebook_order(Tensor nbr) -> Tensor                        # [M]
  sparse_conv_compute(Tensor features, Tensor weight, Tensor nbr,
                      Tensor? bias, Tensor? order=None) -> Tensor    # [M, Cout]

``order`` is always ``sparse_rulebook_order(nbr)``; the ops that build a map
return it too because the GPU kernels compute its sort key in the same pass.

All ops are defined straight on the dispatcher (``torch.library.Library``):
a call is one C++ dispatch into the implementation. ``torch.library.custom_op``
would add two Python kernels (autograd and a backend wrapper) and a
Dynamo-disable wrapper per call (benchmarks/profile_sparse.py measures both
registrations). The rulebook ops take only integer tensors, which never
require grad, so they have no autograd kernel. ``sparse_conv_compute`` takes
float tensors that may require grad, so it has a small autograd kernel: where
grad is required it records a node whose backward raises (inference only,
never a silently missing gradient); otherwise it calls the CPU or CUDA kernel
itself instead of sending the call back through the dispatcher, and any other
key (fake tensors, Python modes, meta) is redispatched as usual.
"""

from __future__ import annotations

import functools

import torch

from ...options import env_flag
from . import reference
from .geometry import conv_output_shape, subm_padding, triple

# Escape hatch for debugging a suspected kernel bug on a GPU machine.
_FORCE_TORCH = env_flag("HYBRID_TRT_SPARSE_TORCH_ONLY", False)

_LIB = torch.library.Library("hybrid_trt", "FRAGMENT")


# Cached: an import statement costs about a microsecond even once the module is loaded.
@functools.cache
def _rulebook_kernels():
    from . import triton_rulebook

    return triton_rulebook


@functools.cache
def _gemm_kernels():
    from . import triton_gemm

    return triton_gemm


def _define(schema: str, torch_impl, cuda_impl, fake):
    """Define ``hybrid_trt::<schema>`` with its torch (any device), CUDA and
    fake implementations; returns the op overload."""
    name = schema.split("(", 1)[0]
    _LIB.define(schema, tags=(torch.Tag.pt2_compliant_tag,))
    # Disabled for Dynamo: where a graph breaks at an op (a strided rulebook without fullgraph), the op runs eagerly,
    # and Dynamo would otherwise compile its Python implementation as user code (21 graphs for a 4-layer net, and
    # torch's lru_cache warning). Tracing never runs these (it runs the fake).
    _LIB.impl(name, torch.compiler.disable(torch_impl), "CompositeExplicitAutograd")
    _LIB.impl(name, torch.compiler.disable(cuda_impl), "CUDA")
    torch.library.register_fake(f"hybrid_trt::{name}", fake, lib=_LIB)
    return getattr(torch.ops.hybrid_trt, name).default


def _check_indices(indices: torch.Tensor, op: str) -> None:
    if indices.dim() != 2 or indices.shape[1] != 4:
        raise ValueError(
            f"{op}: indices must be [N, 4] rows of (batch, z, y, x), got shape {tuple(indices.shape)}"
        )
    if indices.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"{op}: indices must be int32 (spconv's convention, the one the delegate's plugin takes) or "
                        f"int64, got {indices.dtype}")


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


# Geometry is checked once per distinct layer shape, not per call: the hot
# path converts its int[] arguments to tuples and looks them up.


@functools.lru_cache(maxsize=256)
def _subm_geometry(op: str, spatial_shape: tuple, kernel_size: tuple, dilation: tuple):
    ks, dil = triple(kernel_size, "kernel_size"), triple(dilation, "dilation")
    _check_geometry(spatial_shape, ks, (1, 1, 1), (0, 0, 0), dil, op)
    return tuple(int(s) for s in spatial_shape), ks, subm_padding(ks, dil), dil


@functools.lru_cache(maxsize=256)
def _strided_geometry(spatial_shape: tuple, kernel_size: tuple, stride: tuple, padding: tuple, dilation: tuple):
    ks, st = triple(kernel_size, "kernel_size"), triple(stride, "stride")
    pad, dil = triple(padding, "padding"), triple(dilation, "dilation")
    _check_geometry(spatial_shape, ks, st, pad, dil, "sparse_rulebook_strided")
    shape = tuple(int(s) for s in spatial_shape)
    return shape, conv_output_shape(shape, ks, st, pad, dil), ks, st, pad, dil


def _kernel_volume(kernel_size) -> int:
    return kernel_size[0] * kernel_size[1] * kernel_size[2]


# --------------------------------------------------------------------------
# sparse_rulebook_subm (neighbour map) and sparse_rulebook_subm_ordered
# (neighbour map and its row schedule; what SubMConv3d calls)
# --------------------------------------------------------------------------


def _subm_torch(indices, spatial_shape, kernel_size, dilation):
    """Neighbour map of a submanifold conv: outputs are the input sites."""
    _check_indices(indices, "sparse_rulebook_subm")
    shape, ks, pad, dil = _subm_geometry("sparse_rulebook_subm", tuple(spatial_shape), tuple(kernel_size),
                                         tuple(dilation))
    return reference.neighbor_map(indices, indices, shape, ks, (1, 1, 1), pad, dil)


def _subm_cuda(indices, spatial_shape, kernel_size, dilation):
    if _FORCE_TORCH:
        return _subm_torch(indices, spatial_shape, kernel_size, dilation)
    _check_indices(indices, "sparse_rulebook_subm")
    shape, ks, pad, dil = _subm_geometry("sparse_rulebook_subm", tuple(spatial_shape), tuple(kernel_size),
                                         tuple(dilation))
    return _rulebook_kernels().neighbor_search(indices, indices, shape, ks, (1, 1, 1), pad, dil)


def _subm_fake(indices, spatial_shape, kernel_size, dilation):
    return indices.new_empty((indices.shape[0], _kernel_volume(kernel_size)), dtype=torch.int32)


sparse_rulebook_subm = _define(
    "sparse_rulebook_subm(Tensor indices, int[] spatial_shape, int[] kernel_size, int[] dilation) -> Tensor",
    _subm_torch, _subm_cuda, _subm_fake,
)


def _subm_ordered_torch(indices, spatial_shape, kernel_size, dilation):
    nbr = _subm_torch(indices, spatial_shape, kernel_size, dilation)
    return nbr, reference.mask_order(nbr)


def _subm_ordered_cuda(indices, spatial_shape, kernel_size, dilation):
    if _FORCE_TORCH:
        return _subm_ordered_torch(indices, spatial_shape, kernel_size, dilation)
    _check_indices(indices, "sparse_rulebook_subm_ordered")
    shape, ks, _, dil = _subm_geometry("sparse_rulebook_subm_ordered", tuple(spatial_shape), tuple(kernel_size),
                                       tuple(dilation))
    return _rulebook_kernels().subm_rulebook(indices, shape, ks, dil)


def _subm_ordered_fake(indices, spatial_shape, kernel_size, dilation):
    n = indices.shape[0]
    return (indices.new_empty((n, _kernel_volume(kernel_size)), dtype=torch.int32),
            indices.new_empty((n,), dtype=torch.int32))


sparse_rulebook_subm_ordered = _define(
    "sparse_rulebook_subm_ordered(Tensor indices, int[] spatial_shape, int[] kernel_size, int[] dilation)"
    " -> (Tensor, Tensor)",
    _subm_ordered_torch, _subm_ordered_cuda, _subm_ordered_fake,
)


# --------------------------------------------------------------------------
# sparse_rulebook_strided
# --------------------------------------------------------------------------


def _strided_torch(indices, spatial_shape, kernel_size, stride, padding, dilation):
    """Output sites (sorted by neighbour mask, ties by (b, z, y, x)), neighbour map and row schedule
    of a regular sparse conv. The number of output sites depends on the data."""
    _check_indices(indices, "sparse_rulebook_strided")
    _, out_shape, ks, st, pad, dil = _strided_geometry(
        tuple(spatial_shape), tuple(kernel_size), tuple(stride), tuple(padding), tuple(dilation))
    out_indices, nbr = reference.strided_rulebook(indices, out_shape, ks, st, pad, dil)
    # The sites come out in row-schedule order, so mask_order(nbr) is the identity.
    return out_indices, nbr, torch.arange(nbr.shape[0], dtype=torch.int32, device=nbr.device)


def _strided_cuda(indices, spatial_shape, kernel_size, stride, padding, dilation):
    if _FORCE_TORCH:
        return _strided_torch(indices, spatial_shape, kernel_size, stride, padding, dilation)
    _check_indices(indices, "sparse_rulebook_strided")
    geometry = _strided_geometry(tuple(spatial_shape), tuple(kernel_size), tuple(stride), tuple(padding),
                                 tuple(dilation))
    return _rulebook_kernels().strided_rulebook(indices, *geometry)


def _strided_fake(indices, spatial_shape, kernel_size, stride, padding, dilation):
    num_out = torch.library.get_ctx().new_dynamic_size()
    return (
        indices.new_empty((num_out, 4), dtype=torch.int32),
        indices.new_empty((num_out, _kernel_volume(kernel_size)), dtype=torch.int32),
        indices.new_empty((num_out,), dtype=torch.int32),
    )


sparse_rulebook_strided = _define(
    "sparse_rulebook_strided(Tensor indices, int[] spatial_shape, int[] kernel_size, int[] stride, "
    "int[] padding, int[] dilation) -> (Tensor, Tensor, Tensor)",
    _strided_torch, _strided_cuda, _strided_fake,
)


# --------------------------------------------------------------------------
# sparse_rulebook_transpose
# --------------------------------------------------------------------------


def _transpose_torch(nbr, num_in):
    """Neighbour map of the inverse conv of the conv that produced ``nbr``."""
    return reference.transpose_neighbor_map(nbr, num_in)


def _transpose_cuda(nbr, num_in):
    if _FORCE_TORCH:
        return reference.transpose_neighbor_map(nbr, num_in)
    return _rulebook_kernels().transpose_neighbor_map(nbr, num_in)


def _transpose_fake(nbr, num_in):
    return nbr.new_empty((num_in, nbr.shape[1]), dtype=torch.int32)


sparse_rulebook_transpose = _define(
    "sparse_rulebook_transpose(Tensor nbr, SymInt num_in) -> Tensor",
    _transpose_torch, _transpose_cuda, _transpose_fake,
)


# --------------------------------------------------------------------------
# sparse_rulebook_order
# --------------------------------------------------------------------------


def _order_torch(nbr):
    """Row schedule for the compute kernel (rows grouped by neighbour mask).
    Computed once per rulebook and cached with it; any permutation of
    ``range(M)`` gives the same result."""
    return reference.mask_order(nbr)


def _order_cuda(nbr):
    if _FORCE_TORCH:
        return reference.mask_order(nbr)
    return _rulebook_kernels().mask_order(nbr)


def _order_fake(nbr):
    return nbr.new_empty((nbr.shape[0],), dtype=torch.int32)


sparse_rulebook_order = _define(
    "sparse_rulebook_order(Tensor nbr) -> Tensor",
    _order_torch, _order_cuda, _order_fake,
)


# --------------------------------------------------------------------------
# sparse_conv_compute
# --------------------------------------------------------------------------


def _check_compute(features, weight, nbr, bias, order=None):
    # Every call: one test of the whole contract, and the itemised checks
    # below (which say what is wrong) only when it fails.
    fs, ws, ns = features.shape, weight.shape, nbr.shape
    if (len(fs) == 2 and len(ws) == 5 and len(ns) == 2 and ws[4] == fs[1] and ns[1] == ws[1] * ws[2] * ws[3]
            and (bias is None or bias.shape == ws[:1])
            and (order is None or (order.shape == ns[:1] and order.dtype == torch.int32))):
        return
    _explain_compute(features, weight, nbr, bias, order)


def _explain_compute(features, weight, nbr, bias, order):
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


def _compute_torch(features, weight, nbr, bias, order=None):
    """``out[m] = bias + sum_k W[:, k, :] @ features[nbr[m, k]]`` over the
    offsets with ``nbr[m, k] >= 0``; weight layout ``[Cout, kD, kH, kW, Cin]``.
    ``order`` (from sparse_rulebook_order) only schedules the GPU kernel."""
    _check_compute(features, weight, nbr, bias, order)
    return reference.conv_compute(features, weight, nbr, bias)


def _compute_cuda(features, weight, nbr, bias, order=None):
    _check_compute(features, weight, nbr, bias, order)
    if _FORCE_TORCH:
        return reference.conv_compute(features, weight, nbr, bias)
    return _gemm_kernels().conv_compute(features, weight, nbr, bias, order)


def _compute_fake(features, weight, nbr, bias, order=None):
    return features.new_empty((nbr.shape[0], weight.shape[0]))


sparse_conv_compute = _define(
    "sparse_conv_compute(Tensor features, Tensor weight, Tensor nbr, Tensor? bias, Tensor? order=None) -> Tensor",
    _compute_torch, _compute_cuda, _compute_fake,
)


class _NoBackward(torch.autograd.Function):
    """Forward of sparse_conv_compute where autograd records it: a backward
    through it is an error, never a silently missing gradient."""

    @staticmethod
    def forward(ctx, below_autograd, features, weight, nbr, bias, order):
        with torch._C._AutoDispatchBelowAutograd():
            return sparse_conv_compute.redispatch(below_autograd, features, weight, nbr, bias, order)

    @staticmethod
    def backward(ctx, grad):
        raise RuntimeError(
            "hybrid_trt::sparse_conv_compute is inference-only and has no backward; run the model under "
            "torch.no_grad() or torch.inference_mode(), or freeze its weights with requires_grad_(False)"
        )


# The kernels the dispatcher would run next for an ordinary CPU or CUDA call;
# any other key below autograd (fake tensors, Python modes, functionalization,
# meta) goes back through the dispatcher.
_BELOW_AUTOGRAD = torch._C._after_autograd_keyset
_BACKEND_KERNELS = {torch._C.DispatchKey.CPU: _compute_torch, torch._C.DispatchKey.CUDA: _compute_cuda}


def _compute_autograd(keyset, features, weight, nbr, bias, order=None):
    below = keyset & _BELOW_AUTOGRAD
    if torch.is_grad_enabled() and torch._C._any_requires_grad(features, weight, bias):
        return _NoBackward.apply(below, features, weight, nbr, bias, order)
    kernel = _BACKEND_KERNELS.get(below.highestPriorityTypeId())
    if kernel is not None:  # nothing to record: call it without a second trip through the dispatcher
        return kernel(features, weight, nbr, bias, order)
    with torch._C._AutoDispatchBelowAutograd():
        return sparse_conv_compute.redispatch(below, features, weight, nbr, bias, order)


_LIB.impl("sparse_conv_compute", _compute_autograd, "Autograd", with_keyset=True)
