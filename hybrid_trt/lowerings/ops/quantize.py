"""Fake quantization (quantization-aware-trained models): the quantize-dequantize round trip ATen computes,
written as the same float32 arithmetic, so the result is bit-identical to eager.

ATen's kernels compute ``(clamp(zp + nearbyint(x * (1.0f / scale)), qmin, qmax) - zp) * scale``: a product with
the float32 reciprocal, rounding half to even (ONNX Round), any [qmin, qmax]. ONNX QuantizeLinear divides by the
scale and saturates to the integer type's range, so it would differ by one step wherever the two round apart.
"""
from __future__ import annotations

import numpy as np
import torch

from ..registry import lowering
from ._util import only_first_output_used

aten = torch.ops.aten
_F32 = frozenset({torch.float32})


def _fake_quantize(ctx, x: str, inv_scale: str, scale: str, zero_point: str, qmin: int, qmax: int) -> str:
    q = ctx.op("Add", ctx.op("Round", ctx.op("Mul", x, inv_scale)), zero_point)
    q = ctx.op("Min", ctx.op("Max", q, ctx.const(float(qmin), torch.float32)), ctx.const(float(qmax), torch.float32))
    return ctx.op("Mul", ctx.op("Sub", q, zero_point), scale)


@lowering(aten.fake_quantize_per_tensor_affine_cachemask.default, dtypes=_F32 | {torch.bool},
          check=only_first_output_used)
def lower_fake_quantize_per_tensor(ctx, node):
    x, scale, zero_point, qmin, qmax = (ctx.arg(a) if i else a for i, a in enumerate(node.args[:5]))
    inv = float(np.float32(1.0) / np.float32(scale))
    out = _fake_quantize(ctx, ctx.input(x), ctx.const(inv, torch.float32), ctx.const(float(np.float32(scale)),
                         torch.float32), ctx.const(float(zero_point), torch.float32), int(qmin), int(qmax))
    return (out, None)


def _check_per_channel(node):
    zero_point = node.args[2].meta.get("val")
    if not isinstance(zero_point, torch.Tensor) or zero_point.dtype.is_floating_point:
        return "float zero points (ATen truncates zp + round(x / scale) towards zero)"
    return only_first_output_used(node)


@lowering(aten.fake_quantize_per_channel_affine_cachemask.default,
          dtypes=_F32 | {torch.bool, torch.int32, torch.int64}, check=_check_per_channel)
def lower_fake_quantize_per_channel(ctx, node):
    x, scale, zero_point, axis, qmin, qmax = node.args[:6]
    rank, axis = len(ctx.shape(x)), ctx.arg(axis)
    # (C,) -> broadcastable along ``axis``: C followed by one 1 per later dimension
    shape = ctx.ints([-1] + [1] * (rank - 1 - axis % rank))
    per_channel = lambda name: ctx.op("Reshape", name, shape)  # noqa: E731
    scale_name = per_channel(ctx.input(scale, torch.float32))
    inv = ctx.op("Div", ctx.const(1.0, torch.float32), scale_name)  # float32 division: ATen's 1.0f / scale
    out = _fake_quantize(ctx, ctx.input(x), inv, scale_name, per_channel(ctx.input(zero_point, torch.float32)),
                         int(ctx.arg(qmin)), int(ctx.arg(qmax)))
    return (out, None)
