"""Gathers: index_select, embedding, gather, topk."""
from __future__ import annotations

import torch

from ..registry import ANY, NUMERIC, lowering
from ._util import dims, reshape

aten = torch.ops.aten


@lowering(aten.index_select.default, dtypes=ANY)
def lower_index_select(ctx, node):
    x, dim, index = node.args
    if not ctx.shape(x):  # 0-d: ONNX Gather needs rank >= 1; gather from it as a 1-element vector
        picked = ctx.op("Gather", reshape(ctx, ctx.input(x), [1]), ctx.input(index, torch.int64), axis=0)
        return reshape(ctx, picked, ctx.shape(node))
    axis = dims(ctx.arg(dim), len(ctx.shape(x)))[0]
    return ctx.op("Gather", ctx.input(x), ctx.input(index, torch.int64), axis=axis)


@lowering(aten.embedding.default, dtypes=ANY)
def lower_embedding(ctx, node):
    weight, indices = node.args[:2]
    return ctx.op("Gather", ctx.input(weight), ctx.input(indices, torch.int64), axis=0)


def _check_gather(node):
    if node.kwargs.get("sparse_grad"):
        return "sparse_grad"
    x, index = node.args[0].meta.get("val"), node.args[2].meta.get("val")
    if isinstance(x, torch.Tensor) and isinstance(index, torch.Tensor) and x.dim() != index.dim():
        # ATen accepts an empty index of any rank; ONNX GatherElements needs equal ranks.
        return f"index rank {index.dim()} differs from input rank {x.dim()}"
    return None


@lowering(aten.gather.default, dtypes=ANY, check=_check_gather)
def lower_gather(ctx, node):
    x, dim, index = node.args[:3]
    if not ctx.shape(x):  # 0-d input and index: GatherElements needs rank >= 1
        picked = ctx.op("GatherElements", reshape(ctx, ctx.input(x), [1]),
                        reshape(ctx, ctx.input(index, torch.int64), [1]), axis=0)
        return reshape(ctx, picked, [])
    axis = dims(ctx.arg(dim), len(ctx.shape(x)))[0]
    return ctx.op("GatherElements", ctx.input(x), ctx.input(index, torch.int64), axis=axis)


@lowering(aten.topk.default, dtypes=NUMERIC)
def lower_topk(ctx, node):
    args = list(node.args) + [None] * (5 - len(node.args))
    x, k, dim, largest, sorted_ = args[:5]
    dim = -1 if dim is None else ctx.arg(dim)
    largest = True if largest is None else largest
    rank = len(ctx.shape(x))
    name = ctx.input(x) if rank else reshape(ctx, ctx.input(x), [1])  # TopK needs rank >= 1
    axis = dims(dim, max(rank, 1))[0]
    values, indices = ctx.op("TopK", name, ctx.ints([int(ctx.arg(k))]), axis=axis,
                             largest=int(bool(largest)), sorted=1, outputs=2)
    if not rank:
        values, indices = reshape(ctx, values, []), reshape(ctx, indices, [])
    return (values, indices)
