"""Scatters: scatter, scatter_add, scatter_reduce (sum, prod) and index_put, the writes of BEV pooling, pillar
scatter and one-hot encoding, as ONNX ScatterElements/ScatterND.

Where ATen leaves the result undefined (a non-accumulating write of several values to one place), so does ONNX;
reductions that need ONNX opset 18 (amax, amin) and mean stay with Inductor. Every size these lowerings need is
read with ``Shape`` from a tensor of the partition, never written as a number, so a partition over a dynamic
point count lowers to one graph across its range (engines/ranges.py).
"""
from __future__ import annotations

import torch

from ..registry import ANY, lowering
from ._util import dims

aten = torch.ops.aten

_REDUCTIONS = {"sum": "add", "add": "add", "prod": "mul", "multiply": "mul"}


def _check_scatter(node):
    x, index = node.args[0].meta.get("val"), node.args[2].meta.get("val")
    if not isinstance(x, torch.Tensor) or not isinstance(index, torch.Tensor):
        return "no traced shapes"
    if x.dim() == 0 or index.dim() != x.dim():
        return f"index rank {index.dim()} with input rank {x.dim()} (ScatterElements needs equal ranks >= 1)"
    reduce = node.kwargs.get("reduce", node.args[4] if len(node.args) > 4 else None)
    if reduce is not None and reduce not in _REDUCTIONS:
        return f"reduce={reduce!r} (ONNX opset 17 scatters add and multiply only)"
    return None


def _include_self(node) -> bool:
    return node.args[5] if len(node.args) > 5 else node.kwargs.get("include_self", True)


def _updates(ctx, node, src, index) -> str:
    """ATen reads ``src`` only where ``index`` has entries (src may be larger); ONNX wants them equal in shape."""
    if not isinstance(src, torch.fx.Node):  # scatter.value: one scalar everywhere
        return ctx.op("Expand", ctx.const(src, ctx.dtype(node)), ctx.op("Shape", ctx.input(index)))
    name = ctx.input(src, ctx.dtype(node))
    if ctx.shape(src) == ctx.shape(index):
        return name
    rank = len(ctx.shape(index))
    return ctx.op("Slice", name, ctx.ints([0] * rank), ctx.op("Shape", ctx.input(index)), ctx.ints(range(rank)))


@lowering(aten.scatter.src, aten.scatter.value, aten.scatter.reduce, aten.scatter.value_reduce,
          aten.scatter_add.default, aten.scatter_reduce.two, dtypes=ANY, check=_check_scatter)
def lower_scatter(ctx, node):
    x, dim, index, src = node.args[:4]
    reduce = node.kwargs.get("reduce", node.args[4] if len(node.args) > 4 else None)
    reduction = "add" if node.target is aten.scatter_add.default else _REDUCTIONS.get(reduce)
    axis, positions = dims(ctx.arg(dim), len(ctx.shape(x)))[0], ctx.input(index, torch.int64)
    data = ctx.input(x)
    if node.target is aten.scatter_reduce.two and not _include_self(node):
        # ATen leaves self out of the reduction where the index points: put the identity there first.
        identity = ctx.op("Expand", ctx.const(0 if reduction == "add" else 1, ctx.dtype(node)),
                          ctx.op("Shape", positions))
        data = ctx.op("ScatterElements", data, positions, identity, axis=axis)
    return ctx.op("ScatterElements", data, positions, _updates(ctx, node, src, index), axis=axis,
                  reduction=reduction)


def _check_index_put(node):
    x, indices = node.args[0].meta.get("val"), node.args[1]
    if not isinstance(x, torch.Tensor) or x.dim() == 0:
        return "0-d input"
    for idx in indices:
        if idx is not None and idx.meta["val"].dtype not in (torch.int64, torch.int32):
            return f"{idx.meta['val'].dtype} index (a mask: data-dependent positions)"
    if all(idx is None for idx in indices):
        return "no index tensor"
    return None


@lowering(aten.index_put.default, dtypes=ANY, check=_check_index_put)
def lower_index_put(ctx, node):
    """x[i0, :, i2] = values as one ScatterND over the indexed dims, moved to the front (as ``_gather_nd`` reads
    them). ``values`` broadcast to the shape ``x[indices]`` has: the index dims replace the indexed dims where
    those are adjacent, and lead otherwise."""
    x, indices, values = node.args[:3]
    accumulate = node.args[3] if len(node.args) > 3 else node.kwargs.get("accumulate", False)
    rank = len(ctx.shape(x))
    positions = [i for i, idx in enumerate(indices) if idx is not None]
    rest = [d for d in range(rank) if d not in positions]
    front = positions + rest
    data = ctx.input(x) if front == list(range(rank)) else ctx.op("Transpose", ctx.input(x), perm=front)
    x_shape = ctx.op("Shape", ctx.input(x))
    index_names = [ctx.input(indices[i], torch.int64) for i in positions]
    # The broadcast shape of the index tensors, read from their sum (ONNX Add broadcasts as ATen indexing does).
    common = index_names[0] if len(index_names) == 1 else _sum(ctx, index_names)
    batch = ctx.op("Shape", common)
    stacked = ctx.op("Concat", *[ctx.op("Unsqueeze", _wrapped(ctx, name, x_shape, d, batch, len(index_names) > 1),
                                        ctx.ints([-1])) for name, d in zip(index_names, positions)], axis=-1)
    updates = _front_updates(ctx, node, values, x_shape, positions, rest, batch)
    out = ctx.op("ScatterND", data, stacked, updates, reduction="add" if accumulate else None)
    if front == list(range(rank)):
        return out
    return ctx.op("Transpose", out, perm=[front.index(d) for d in range(rank)])


def _sum(ctx, names: list) -> str:
    total = names[0]
    for name in names[1:]:
        total = ctx.op("Add", total, name)
    return total


def _dims_of(ctx, shape: str, dims: list) -> str:
    """The sizes of ``dims`` (a 1-D int64 tensor) from a tensor's ``Shape``."""
    return ctx.op("Gather", shape, ctx.ints(dims), axis=0)


def _wrapped(ctx, index: str, x_shape: str, dim: int, batch: str, expand: bool) -> str:
    """The index broadcast to the common shape, negatives counted from the end as ATen counts them."""
    idx = ctx.op("Expand", index, batch) if expand else index
    size = ctx.op("Gather", x_shape, ctx.const(dim, torch.int64), axis=0)  # 0-d: a 0-d index stays 0-d
    return ctx.op("Where", ctx.op("Less", idx, ctx.const(0, torch.int64)), ctx.op("Add", idx, size), idx)


def _front_updates(ctx, node, values, x_shape: str, positions, rest, batch: str) -> str:
    first, b = positions[0], len(torch.broadcast_shapes(*[ctx.shape(node.args[1][i]) for i in positions]))
    adjacent = positions == list(range(first, first + len(positions)))
    if adjacent and first > 0:  # x[indices] is rest[:first] + batch + rest[first:]
        parts = [_dims_of(ctx, x_shape, rest[:first]), batch] + ([_dims_of(ctx, x_shape, rest[first:])]
                                                                 if rest[first:] else [])
        read_rank = len(rest) + b
        perm = [*range(first, first + b), *range(first), *range(first + b, read_rank)]
    else:
        parts, perm = [batch] + ([_dims_of(ctx, x_shape, rest)] if rest else []), None
    read = ctx.op("Concat", *parts, axis=0) if len(parts) > 1 else parts[0]
    name = ctx.op("Expand", ctx.input(values, ctx.dtype(node)), read)
    return ctx.op("Transpose", name, perm=perm) if perm else name
