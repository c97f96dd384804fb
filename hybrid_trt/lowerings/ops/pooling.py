"""Max / average / adaptive-average pooling (2-D)."""
from __future__ import annotations

import torch

from ..registry import FLOAT, lowering
from ._util import nan_mask, only_first_output_used, where_nan

aten = torch.ops.aten


def _pair(v):
    v = [int(e) for e in v]
    return v * 2 if len(v) == 1 else v


def _window(ctx, kernel, stride, padding) -> dict:
    """ATen pooling window arguments as ONNX attributes (an empty stride means stride = kernel)."""
    kernel = _pair(ctx.arg(kernel))
    stride = _pair(ctx.arg(stride)) if stride else kernel
    padding = _pair(ctx.arg(padding)) if padding is not None else [0, 0]
    return dict(kernel_shape=kernel, strides=stride, pads=padding + padding)


def _check_max_pool(node):
    x = node.args[0].meta.get("val")
    if x is None or x.dim() != 4:
        return "only 4-D (N, C, H, W) inputs"
    return only_first_output_used(node)


@lowering(aten.max_pool2d_with_indices.default, dtypes=FLOAT, check=_check_max_pool)
def lower_max_pool2d(ctx, node):
    args = list(node.args) + [None] * (6 - len(node.args))
    x, kernel, stride, padding, dilation, ceil_mode = args[:6]
    dilation = _pair(ctx.arg(dilation)) if dilation is not None else [1, 1]
    attrs = dict(_window(ctx, kernel, stride, padding), dilations=dilation, ceil_mode=int(bool(ceil_mode)))
    xin, dtype = ctx.input(x), ctx.dtype(x)
    out = ctx.op("MaxPool", xin, **attrs)
    nan_in_window = ctx.op("MaxPool", nan_mask(ctx, xin, dtype), **attrs)
    return (where_nan(ctx, nan_in_window, dtype, None, out), None)


def _check_avg_pool(node):
    x = node.args[0].meta.get("val")
    if x is None or x.dim() != 4:
        return "only 4-D (N, C, H, W) inputs"
    if len(node.args) > 6 and node.args[6] is not None:
        return "divisor_override"
    ceil_mode = node.args[4] if len(node.args) > 4 else False
    if ceil_mode:
        return "ceil_mode average pooling (window clipping differs from ONNX)"
    return None


@lowering(aten.avg_pool2d.default, dtypes=FLOAT, check=_check_avg_pool)
def lower_avg_pool2d(ctx, node):
    args = list(node.args) + [None] * (7 - len(node.args))
    x, kernel, stride, padding, ceil_mode, count_include_pad = args[:6]
    include = True if count_include_pad is None else bool(count_include_pad)
    return ctx.op("AveragePool", ctx.input(x), **_window(ctx, kernel, stride, padding),
                  count_include_pad=int(include))


def _check_adaptive(node):
    x = node.args[0].meta.get("val")
    if x is None or x.dim() != 4:
        return "only 4-D inputs"
    out = node.args[1]
    h, w = int(x.shape[2]), int(x.shape[3])
    oh, ow = (int(o) for o in out)
    if (oh, ow) != (1, 1) and (h % oh or w % ow):
        return "output size does not divide the input size"
    return None


@lowering(aten._adaptive_avg_pool2d.default, dtypes=FLOAT, check=_check_adaptive)
def lower_adaptive_avg_pool2d(ctx, node):
    x = node.args[0]
    oh, ow = (int(o) for o in ctx.arg(node.args[1]))
    if (oh, ow) == (1, 1):
        return ctx.op("GlobalAveragePool", ctx.input(x))
    h, w = ctx.shape(x)[2:]
    kernel = [h // oh, w // ow]
    return ctx.op("AveragePool", ctx.input(x), kernel_shape=kernel, strides=kernel)
