"""Nodes whose value depends on no tensor data (factories, *_like fills): evaluated once per engine build and
stored as initializers, which is what an ONNX exporter would constant-fold them into anyway. Where the output's
size varies over a dynamic range (traced symbolic), the value is built from the shape instead (ConstantOfShape,
Range), so one graph serves every size of the range."""
from __future__ import annotations

from typing import Optional

import numpy as np
import torch
from onnx import numpy_helper

from ..context import TORCH_TO_ONNX
from ..registry import ANY, lowering
from ._dims import dim_of, is_symbolic, shape_value, traced_shape

aten = torch.ops.aten
prims = torch.ops.prims

# ConstantOfShape takes no bfloat16 before opset 20; those keep the per-shape initializer.
_FILLABLE = frozenset(TORCH_TO_ONNX) - {torch.bfloat16}


def _on_cpu(kwargs):
    return {**{k: v for k, v in kwargs.items() if k != "pin_memory"}, "device": "cpu"}


_FILLS = (aten.full.default, aten.zeros.default, aten.ones.default, aten.empty.memory_format)


@lowering(*_FILLS, aten.arange.start_step, aten.arange.start, aten.arange.default, aten.scalar_tensor.default,
          prims.iota.default, dtypes=ANY)
def lower_factory(ctx, node):
    if node.target is aten.empty.memory_format:  # its contents are unspecified: zeros are as good as any
        value = torch.zeros(ctx.val(node).shape, dtype=ctx.val(node).dtype)
    else:
        value = node.target(*ctx.arg(node.args), **_on_cpu(ctx.arg(dict(node.kwargs))))
    if node.target in _FILLS and value.numel():
        generic = _filled(ctx, node, shape_value(ctx, node), value.reshape(-1)[0].item())
        if generic is not None:
            return generic
    if node.target in (aten.arange.start_step, aten.arange.start, aten.arange.default):
        generic = _arange(ctx, node, value)
        if generic is not None:
            return generic
    return ctx.tensor_const(value)


@lowering(aten.full_like.default, aten.zeros_like.default, aten.ones_like.default, aten.fill.Scalar, dtypes=ANY)
def lower_fill_like(ctx, node):
    out = ctx.val(node)
    fill = {aten.zeros_like.default: 0, aten.ones_like.default: 1}.get(node.target)
    if fill is None:
        fill = ctx.arg(node.args[1])
    value = torch.full(tuple(out.shape), fill, dtype=out.dtype)
    if is_symbolic(traced_shape(node)) and value.numel():
        # The output has its input's shape: read it from the input.
        generic = _filled(ctx, node, ctx.op("Shape", ctx.input(node.args[0])), value.reshape(-1)[0].item())
        if generic is not None:
            return generic
    return ctx.tensor_const(value)


def _filled(ctx, node, shape: Optional[str], fill) -> Optional[str]:
    """ConstantOfShape of ``shape`` holding ``fill`` (already rounded to the output dtype by torch)."""
    dtype = ctx.val(node).dtype
    if shape is None or dtype not in _FILLABLE:
        return None
    array = torch.tensor([fill], dtype=dtype).numpy()
    return ctx.op("ConstantOfShape", shape, value=numpy_helper.from_array(np.asarray(array), "value"))


def _arange(ctx, node, value: torch.Tensor) -> Optional[str]:
    """``arange(start, start + n * step, step)`` with integer start and step and a length n that varies over the
    range: ONNX Range in int64 (exact), cast to the output dtype, as torch's integer-valued results are."""
    sizes = traced_shape(node)
    if not is_symbolic(sizes) or value.dtype not in _FILLABLE or value.dtype == torch.bool:
        return None
    args = ctx.arg(node.args)
    kwargs = dict(node.kwargs)
    if node.target is aten.arange.default:
        start, step = 0, 1
    elif node.target is aten.arange.start:
        start, step = args[0], 1
    else:
        start, step = args[0], args[2] if len(args) > 2 else kwargs.get("step", 1)
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (start, step)) or step == 0:
        return None
    n = dim_of(ctx, sizes[0], len(value))
    if n is None:
        return None
    count = ctx.op("Squeeze", n, ctx.ints([0]))
    first = ctx.const(start, torch.int64)
    limit = ctx.op("Add", ctx.op("Mul", count, ctx.const(step, torch.int64)), first)
    out = ctx.op("Range", first, limit, ctx.const(step, torch.int64))
    return out if value.dtype == torch.int64 else ctx.cast(out, value.dtype)
