"""Scatters: scatter, scatter_add, scatter_reduce (sum, prod) and index_put, the writes of BEV pooling, pillar
scatter and one-hot encoding, as ONNX ScatterElements/ScatterND.

Where ATen leaves the result undefined (a non-accumulating write of several values to one place), so does ONNX;
reductions that need ONNX opset 18 (amax, amin) and mean stay with Inductor.
"""
from __future__ import annotations

import torch

from ..registry import ANY, NUMERIC, lowering
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
    shape = ctx.shape(index)
    if not isinstance(src, torch.fx.Node):  # scatter.value: one scalar everywhere
        return ctx.op("Expand", ctx.const(src, ctx.dtype(node)), ctx.ints(shape))
    name = ctx.input(src, ctx.dtype(node))
    if ctx.shape(src) == shape:
        return name
    return ctx.op("Slice", name, ctx.ints([0] * len(shape)), ctx.ints(shape), ctx.ints(range(len(shape))))


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
                          ctx.ints(ctx.shape(index)))
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
    shapes = [idx.meta["val"].shape for idx in indices if idx is not None]
    if not shapes or not all(isinstance(s, int) for shape in shapes for s in shape):
        return "index tensors with symbolic shapes"
    return None


@lowering(aten.index_put.default, dtypes=ANY, check=_check_index_put)
def lower_index_put(ctx, node):
    """x[i0, :, i2] = values as one ScatterND over the indexed dims, moved to the front (as ``_gather_nd`` reads
    them). ``values`` broadcast to the shape ``x[indices]`` has: the index dims replace the indexed dims where
    those are adjacent, and lead otherwise."""
    x, indices, values = node.args[:3]
    accumulate = node.args[3] if len(node.args) > 3 else node.kwargs.get("accumulate", False)
    shape = ctx.shape(x)
    positions = [i for i, idx in enumerate(indices) if idx is not None]
    rest = [d for d in range(len(shape)) if d not in positions]
    batch = list(torch.broadcast_shapes(*[ctx.shape(indices[i]) for i in positions]))
    front = positions + rest
    data = ctx.input(x) if front == list(range(len(shape))) else ctx.op("Transpose", ctx.input(x), perm=front)
    stacked = ctx.op("Concat", *[ctx.op("Unsqueeze", _wrapped(ctx, indices[i], shape[i], batch), ctx.ints([-1]))
                                 for i in positions], axis=-1)
    updates = _front_updates(ctx, node, values, shape, positions, rest, batch)
    out = ctx.op("ScatterND", data, stacked, updates, reduction="add" if accumulate else None)
    if front == list(range(len(shape))):
        return out
    return ctx.op("Transpose", out, perm=[front.index(d) for d in range(len(shape))])


def _wrapped(ctx, index, size: int, batch) -> str:
    """The index broadcast to the common shape, negatives counted from the end as ATen counts them."""
    idx = ctx.op("Expand", ctx.input(index, torch.int64), ctx.ints(batch))
    zero, size = ctx.const(0, torch.int64), ctx.const(size, torch.int64)  # 0-d: a 0-d index stays 0-d
    return ctx.op("Where", ctx.op("Less", idx, zero), ctx.op("Add", idx, size), idx)


def _front_updates(ctx, node, values, shape, positions, rest, batch) -> str:
    first, b = positions[0], len(batch)
    adjacent = positions == list(range(first, first + len(positions)))
    rest_sizes = [shape[d] for d in rest]
    if adjacent and first > 0:  # x[indices] is rest[:first] + batch + rest[first:]
        read = rest_sizes[:first] + batch + rest_sizes[first:]
        perm = [*range(first, first + b), *range(first), *range(first + b, len(read))]
    else:
        read, perm = batch + rest_sizes, None
    name = ctx.op("Expand", ctx.input(values, ctx.dtype(node)), ctx.ints(read))
    return ctx.op("Transpose", name, perm=perm) if perm else name
