"""Lowerings of the sparse ops to ONNX nodes in the ``hybrid_trt.sparse``
domain, taken only by the TensorRT delegate (through the plugins in
trt_plugin.py). Where no delegate takes them they stay in the Inductor graph
as extern calls to the custom ops.

Node format (what the TensorRT ONNX parser needs to find a Python plugin):
op type = plugin name, string attribute ``plugin_namespace`` = plugin
namespace, int attribute ``aot`` = 1 to use the plugin's AOT implementation.

  SparseConv3d(features [N, Cin], weight [K, Cin, Cout], nbr int32 [M, K],
               order int32 [M], bias [Cout]) -> [M, Cout]
      attrs: kernel_volume, in_channels, out_channels
  SparseRulebookOrder(nbr int32 [M, K]) -> int32 [M]
  SparseRulebookSubM(indices int32 [N, 4]) -> nbr int32 [N, K]
      attrs: spatial_shape, kernel_size, dilation
      (sparse_rulebook_subm_ordered lowers to SparseRulebookSubM followed by
      SparseRulebookOrder)
  SparseRulebookTranspose(nbr int32 [M, K]) -> int32 [num_in, K]
      attrs: num_in
"""

from __future__ import annotations

import math

import torch

from hybrid_trt.delegates.registry import accept_domain
from hybrid_trt.lowerings.registry import lowering

from . import ops  # noqa: F401  (registers torch.ops.hybrid_trt.sparse_*)

DOMAIN = "hybrid_trt.sparse"
PLUGIN_NAMESPACE = "hybrid_trt"
DELEGATE = "tensorrt"

_sparse = torch.ops.hybrid_trt
_FLOATS = frozenset({torch.float32, torch.float16})
_DTYPES = _FLOATS | {torch.int32}


def _meta(arg):
    return arg.meta.get("val") if hasattr(arg, "meta") else None


def _compute_args(node):
    features, weight, nbr, bias, *rest = node.args
    order = rest[0] if rest else node.kwargs.get("order")
    return features, weight, nbr, bias, order


def _check_compute(node):
    features, weight, nbr, bias, _ = _compute_args(node)
    f, w, n = _meta(features), _meta(weight), _meta(nbr)
    if f is None or w is None or n is None:
        return "sparse_conv_compute: input shapes unknown"
    if f.dtype not in _FLOATS or w.dtype != f.dtype:
        return f"sparse_conv_compute: features/weight must share fp32 or fp16, got {f.dtype}/{w.dtype}"
    if bias is not None and _meta(bias) is not None and _meta(bias).dtype != f.dtype:
        return "sparse_conv_compute: bias dtype differs from features"
    if n.dtype != torch.int32:
        return f"sparse_conv_compute: rulebook must be int32, got {n.dtype}"
    return None


def _check_indices(node):
    idx = _meta(node.args[0])
    if idx is None or idx.dtype != torch.int32:
        return "sparse rulebook: indices must be int32 (the plugin reads int32 coordinates)"
    return None


def _check_strided(node):
    # The output size is data-dependent; the TensorRT delegate builds engines
    # with static output shapes, so this op stays with Inductor for now.
    return "sparse_rulebook_strided has a data-dependent output size; it runs as an Inductor extern call"


@lowering(_sparse.sparse_conv_compute.default, dtypes=_DTYPES, check=_check_compute, domain=DOMAIN)
def lower_sparse_conv_compute(ctx, node):
    features, weight, nbr, bias, order = _compute_args(node)
    c_out, *ksize, c_in = ctx.shape(weight)
    k = math.prod(ksize)
    dtype = ctx.dtype(features)
    # The plugin takes W as [K, Cin, Cout]; with a constant weight TensorRT
    # folds this reshape/transpose at build time.
    w = ctx.op("Reshape", ctx.input(weight), ctx.ints([c_out, k, c_in]))
    w = ctx.op("Transpose", w, perm=[1, 2, 0])
    b = ctx.input(bias) if bias is not None else ctx.const([0.0] * c_out, dtype)
    if order is not None:
        rows = ctx.input(order)
    else:  # identity schedule
        m = ctx.shape(nbr)[0]
        rows = ctx.op("Range", ctx.const(0, torch.int32), ctx.const(m, torch.int32), ctx.const(1, torch.int32))
    return ctx.op(
        "SparseConv3d", ctx.input(features), w, ctx.input(nbr), rows, b,
        domain=DOMAIN, plugin_namespace=PLUGIN_NAMESPACE, aot=1,
        kernel_volume=k, in_channels=c_in, out_channels=c_out,
    )


@lowering(_sparse.sparse_rulebook_subm.default, dtypes={torch.int32}, check=_check_indices, domain=DOMAIN)
def lower_sparse_rulebook_subm(ctx, node):
    indices, spatial_shape, kernel_size, dilation = node.args
    return ctx.op(
        "SparseRulebookSubM", ctx.input(indices),
        domain=DOMAIN, plugin_namespace=PLUGIN_NAMESPACE, aot=0,
        spatial_shape=[int(s) for s in ctx.arg(spatial_shape)],
        kernel_size=[int(s) for s in ctx.arg(kernel_size)],
        dilation=[int(s) for s in ctx.arg(dilation)],
    )


@lowering(_sparse.sparse_rulebook_subm_ordered.default, dtypes={torch.int32}, check=_check_indices, domain=DOMAIN)
def lower_sparse_rulebook_subm_ordered(ctx, node):
    # The fused op (map and row schedule in one GPU pass) is two plugin nodes here.
    nbr = lower_sparse_rulebook_subm(ctx, node)
    order = ctx.op("SparseRulebookOrder", nbr, domain=DOMAIN, plugin_namespace=PLUGIN_NAMESPACE, aot=0)
    return nbr, order


@lowering(_sparse.sparse_rulebook_transpose.default, dtypes={torch.int32}, domain=DOMAIN)
def lower_sparse_rulebook_transpose(ctx, node):
    nbr, num_in = node.args
    return ctx.op(
        "SparseRulebookTranspose", ctx.input(nbr),
        domain=DOMAIN, plugin_namespace=PLUGIN_NAMESPACE, aot=0, num_in=int(ctx.arg(num_in)),
    )


@lowering(_sparse.sparse_rulebook_order.default, dtypes={torch.int32}, domain=DOMAIN)
def lower_sparse_rulebook_order(ctx, node):
    return ctx.op("SparseRulebookOrder", ctx.input(node.args[0]), domain=DOMAIN, plugin_namespace=PLUGIN_NAMESPACE, aot=0)


@lowering(_sparse.sparse_rulebook_strided.default, dtypes={torch.int32}, check=_check_strided, domain=DOMAIN)
def lower_sparse_rulebook_strided(ctx, node):
    raise NotImplementedError(_check_strided(node))


accept_domain(DELEGATE, DOMAIN)
