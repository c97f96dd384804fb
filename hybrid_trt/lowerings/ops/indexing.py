"""Gathers: index_select, embedding, gather, topk."""
from __future__ import annotations

import torch

from ..registry import ANY, NUMERIC, lowering
from ._util import dims

aten = torch.ops.aten


@lowering(aten.index_select.default, dtypes=ANY)
def lower_index_select(ctx, node):
    x, dim, index = node.args
    axis = dims(ctx.arg(dim), max(len(ctx.shape(x)), 1))[0]
    return ctx.op("Gather", ctx.input(x), ctx.input(index, torch.int64), axis=axis)


@lowering(aten.embedding.default, dtypes=ANY)
def lower_embedding(ctx, node):
    weight, indices = node.args[:2]
    return ctx.op("Gather", ctx.input(weight), ctx.input(indices, torch.int64), axis=0)


def _check_gather(node):
    return "sparse_grad" if node.kwargs.get("sparse_grad") else None


@lowering(aten.gather.default, dtypes=ANY, check=_check_gather)
def lower_gather(ctx, node):
    x, dim, index = node.args[:3]
    axis = dims(ctx.arg(dim), max(len(ctx.shape(x)), 1))[0]
    return ctx.op("GatherElements", ctx.input(x), ctx.input(index, torch.int64), axis=axis)


@lowering(aten.topk.default, dtypes=NUMERIC)
def lower_topk(ctx, node):
    args = list(node.args) + [None] * (5 - len(node.args))
    x, k, dim, largest, sorted_ = args[:5]
    dim = -1 if dim is None else ctx.arg(dim)
    largest = True if largest is None else largest
    axis = dims(dim, len(ctx.shape(x)))[0]
    values, indices = ctx.op("TopK", ctx.input(x), ctx.ints([int(ctx.arg(k))]), axis=axis,
                             largest=int(bool(largest)), sorted=1, outputs=2)
    return (values, indices)
