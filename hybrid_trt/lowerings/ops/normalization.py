"""Batch norm (inference), layer norm, softmax and log-softmax."""
from __future__ import annotations

import torch
import torch.fx as fx

from ..context import ORT_CPU
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
    return _softmax(ctx, "Softmax", node, int(ctx.arg(node.args[1])))


@lowering(aten._log_softmax.default, dtypes=FLOAT, check=_check_softmax)
def lower_log_softmax(ctx, node):
    return _softmax(ctx, "LogSoftmax", node, int(ctx.arg(node.args[1])))


# The stride (in elements) of the softmax axis from which ONNX Runtime's CPU Softmax is slower than its reductions.
_CPU_SOFTMAX_STRIDE = 64


def _softmax(ctx, op: str, node: fx.Node, axis: int) -> str:
    """``op`` (Softmax, LogSoftmax) of ``node``'s input over ``axis``, written out as its reductions (max, exp,
    sum) on ONNX Runtime's CPU provider where the axis is not the last and its elements lie 64 or more apart:
    there the kernel transposes the axis to the end and back (2-core CPU: a channel softmax of 4x64x32x32 took
    1.61 ms against 0.11 ms for the reductions; CoaT's softmax over 3137 tokens of a [1, 3137, 8, 8] layout 1.28
    against 0.35 ms). The layout is the traced input's strides: ONNX Runtime's transpose optimizer moves the
    permutes of an attention past the softmax, so a permuted view's axis ends up as far apart as its strides say.
    With elements closer together the kernel is the faster (8 apart: 0.15 against 0.29 ms)."""
    x = node.args[0]
    rank = len(ctx.shape(x))
    axis = axis % rank
    val = x.meta.get("val")
    stride = _hinted(val.stride()[axis]) if isinstance(val, torch.Tensor) else None
    if ctx.target != ORT_CPU or axis == rank - 1 or stride is None or stride < _CPU_SOFTMAX_STRIDE:
        return ctx.op(op, ctx.input(x), axis=axis)
    xin = ctx.input(x)
    shifted = ctx.op("Sub", xin, ctx.op("ReduceMax", xin, axes=[axis], keepdims=1))
    exp = ctx.op("Exp", shifted)
    total = ctx.op("ReduceSum", exp, ctx.ints([axis]), keepdims=1)
    if op == "Softmax":
        return ctx.op("Div", exp, total)
    return ctx.op("Sub", shifted, ctx.op("Log", total))


def _hinted(size) -> "int | None":
    """A traced stride as a number: a symbolic one (a partition traced with symbolic sizes) by its example's value."""
    if isinstance(size, torch.SymInt):
        hint = size.node.hint
        return None if hint is None else int(hint)
    return int(size)
