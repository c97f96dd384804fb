"""Matrix products: addmm (linear layers), mm, bmm; pairwise distances (cdist)."""
from __future__ import annotations

import torch

from ..registry import FLOAT, lowering

aten = torch.ops.aten


@lowering(aten.addmm.default, dtypes=FLOAT)
def lower_addmm(ctx, node):
    bias, a, b = node.args[:3]
    beta = node.kwargs.get("beta", 1)
    alpha = node.kwargs.get("alpha", 1)
    return ctx.op("Gemm", ctx.input(a), ctx.input(b), ctx.input(bias), alpha=float(alpha), beta=float(beta))


@lowering(aten.mm.default, aten.bmm.default, dtypes=FLOAT)
def lower_matmul(ctx, node):
    return ctx.op("MatMul", ctx.input(node.args[0]), ctx.input(node.args[1]))


@lowering(aten.baddbmm.default, dtypes=FLOAT)
def lower_baddbmm(ctx, node):
    dtype = ctx.dtype(node)
    bias, a, b = node.args[:3]
    prod = ctx.op("MatMul", ctx.input(a), ctx.input(b))
    alpha, beta = node.kwargs.get("alpha", 1), node.kwargs.get("beta", 1)
    if alpha != 1:
        prod = ctx.op("Mul", prod, ctx.const(float(alpha), dtype))
    bias = ctx.input(bias)
    if beta != 1:
        bias = ctx.op("Mul", bias, ctx.const(float(beta), dtype))
    return ctx.op("Add", prod, bias)


# Pairwise distances (point-cloud neighbour search). ATen computes p = 2 through a matrix product
# (``_euclidean_dist``, traced as the ops it is) when a side has more than 25 points; ``_cdist_forward`` is what
# is left: the direct differences, for small sets and every other p.
_CDIST_LIMIT = 1 << 24  # elements of the (..., P, R, M) difference tensor the direct form materialises


def _check_cdist(node):
    x1, x2, p = node.args[0].meta.get("val"), node.args[1].meta.get("val"), node.args[2]
    mode = node.args[3] if len(node.args) > 3 else None
    if not isinstance(x1, torch.Tensor) or not isinstance(x2, torch.Tensor) or x1.dim() < 2 or x2.dim() < 2:
        return "inputs of rank < 2"
    if p == 2 and (mode == 1 or (mode in (None, 0) and (x1.shape[-2] > 25 or x2.shape[-2] > 25))):
        return "p=2 by ATen's matrix-product path (called directly)"
    if p < 0:
        return f"p={p}"
    batch = torch.broadcast_shapes(x1.shape[:-2], x2.shape[:-2])
    if not all(isinstance(s, int) for s in (*batch, *x1.shape[-2:], x2.shape[-2])):
        return "symbolic sizes"
    if batch.numel() * x1.shape[-2] * x2.shape[-2] * x1.shape[-1] > _CDIST_LIMIT:
        return "the direct differences would exceed 2**24 elements"
    return None


@lowering(aten._cdist_forward.default, check=_check_cdist)
def lower_cdist(ctx, node):
    x1, x2, p = node.args[:3]
    dtype = ctx.dtype(node)
    diff = ctx.op("Abs", ctx.op("Sub", ctx.op("Unsqueeze", ctx.input(x1), ctx.ints([-2])),
                                ctx.op("Unsqueeze", ctx.input(x2), ctx.ints([-3]))))
    if p == 0:  # the number of coordinates that differ
        differs = ctx.cast(ctx.op("Greater", diff, ctx.const(0.0, dtype)), dtype)
        return ctx.op("ReduceSum", differs, ctx.ints([-1]), keepdims=0)
    if p == 1:
        return ctx.op("ReduceSum", diff, ctx.ints([-1]), keepdims=0)
    if p == float("inf"):
        return ctx.op("ReduceMax", diff, axes=[-1], keepdims=0)
    if p == 2:
        return ctx.op("Sqrt", ctx.op("ReduceSum", ctx.op("Mul", diff, diff), ctx.ints([-1]), keepdims=0))
    powered = ctx.op("ReduceSum", ctx.op("Pow", diff, ctx.const(float(p), dtype)), ctx.ints([-1]), keepdims=0)
    return ctx.op("Pow", powered, ctx.const(1.0 / p, dtype))

