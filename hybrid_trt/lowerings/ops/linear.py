"""Matrix products: addmm (linear layers), mm, bmm."""
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
