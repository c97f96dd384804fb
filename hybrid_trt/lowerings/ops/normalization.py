"""Batch norm (inference), layer norm, softmax and log-softmax."""
from __future__ import annotations

import torch

from ..registry import FLOAT, lowering
from ._util import only_first_output_used

aten = torch.ops.aten


def _check_bn(node):
    x = node.args[0].meta.get("val")
    if x is None or x.dim() < 2:
        return "input rank < 2"
    return only_first_output_used(node)


@lowering(aten._native_batch_norm_legit_no_training.default, dtypes=FLOAT, check=_check_bn)
def lower_batch_norm(ctx, node):
    x, weight, bias, mean, var, _momentum, eps = node.args
    channels = ctx.shape(x)[1]
    dtype = ctx.dtype(x)
    scale = ctx.input(weight) if weight is not None else ctx.const([1.0] * channels, dtype)
    shift = ctx.input(bias) if bias is not None else ctx.const([0.0] * channels, dtype)
    out = ctx.op("BatchNormalization", ctx.input(x), scale, shift, ctx.input(mean), ctx.input(var),
                 epsilon=float(ctx.arg(eps)))
    return (out, None, None)


def _check_layer_norm(node):
    return only_first_output_used(node)


@lowering(aten.native_layer_norm.default, dtypes=FLOAT, check=_check_layer_norm)
def lower_layer_norm(ctx, node):
    x, normalized_shape, weight, bias, eps = node.args
    dtype = ctx.dtype(x)
    shape = [int(s) for s in ctx.arg(normalized_shape)]
    numel = 1
    for s in shape:
        numel *= s
    scale = ctx.input(weight) if weight is not None else ctx.const(torch.ones(shape), dtype)
    inputs = [ctx.input(x), scale]
    if bias is not None:
        inputs.append(ctx.input(bias))
    out = ctx.op("LayerNormalization", *inputs, axis=-len(shape), epsilon=float(ctx.arg(eps)))
    return (out, None, None)


def _check_softmax(node):
    half_to_float = node.args[2]
    if half_to_float:
        return "half_to_float"
    x = node.args[0].meta.get("val")
    return "0-d input (ONNX Softmax needs rank >= 1)" if isinstance(x, torch.Tensor) and x.dim() == 0 else None


@lowering(aten._softmax.default, dtypes=FLOAT, check=_check_softmax)
def lower_softmax(ctx, node):
    return ctx.op("Softmax", ctx.input(node.args[0]), axis=int(ctx.arg(node.args[1])))


@lowering(aten._log_softmax.default, dtypes=FLOAT, check=_check_softmax)
def lower_log_softmax(ctx, node):
    return ctx.op("LogSoftmax", ctx.input(node.args[0]), axis=int(ctx.arg(node.args[1])))
