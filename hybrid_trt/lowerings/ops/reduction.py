"""Reductions: sum, mean, amax/amin, max/min over a dim (values and indices), argmax/argmin, var, any/all."""
from __future__ import annotations

import math

import torch

from ..context import ORT_CPU
from ..registry import ANY, BOOL, FLOAT, NUMERIC, lowering
from ._util import dims, nan_mask, where_nan

aten = torch.ops.aten


def _axes(ctx, x, dim) -> list[int]:
    rank = len(ctx.shape(x))
    return dims(ctx.arg(dim) if dim is not None else None, rank) if dim not in (None, []) else list(range(rank))


def _reduce(ctx, op_type, x, dim, keepdim, dtype=None):
    shape = ctx.shape(x)
    axes = _axes(ctx, x, dim)
    out_dtype = dtype or ctx.dtype(x)
    x = ctx.input(x, dtype)
    if not shape:
        return ctx.op("Identity", x)
    if op_type in _SUMS and out_dtype.is_floating_point:
        return _float_sum(ctx, op_type, x, shape, axes, keepdim, out_dtype)
    return _one_pass(ctx, op_type, x, axes, keepdim)


def _one_pass(ctx, op_type, x: str, axes, keepdim) -> str:
    if op_type == "ReduceSum":  # opset 13+: axes is an input for ReduceSum only
        return ctx.op(op_type, x, ctx.ints(list(axes)), keepdims=int(bool(keepdim)))
    return ctx.op(op_type, x, axes=list(axes), keepdims=int(bool(keepdim)))


# ONNX Runtime's CPU ReduceSum/ReduceMean add float values into a few running sums, so their error grows with the
# count: the mean of 4M float32 values near 500 came out 2e-3 off (a variance of them 57x off), where ATen's
# cascade sum is exact to rounding. A float sum or mean of more than _ONE_PASS_MAX elements is therefore reduced
# in stages of at most about sqrt(n) elements: axis by axis, innermost first, and an axis longer than that as
# blocks (_long_axis). On every target, so the form does not depend on the kernels; it adds a few kernels to
# large reductions only (a 224x224 image's pools are far below the bound).
_SUMS = frozenset({"ReduceSum", "ReduceMean"})
_ONE_PASS_MAX = 2 ** 16


def _count(shape, axes) -> int:
    count = 1
    for a in axes:
        count *= shape[a]
    return count


def _float_sum(ctx, op_type, x: str, shape, axes, keepdim, dtype) -> str:
    if _count(shape, axes) <= _ONE_PASS_MAX:
        return _one_pass(ctx, op_type, x, axes, keepdim)
    for a in sorted(axes, reverse=True):
        x = _long_axis(ctx, op_type, x, shape, a, dtype) if shape[a] > _ONE_PASS_MAX else \
            _one_pass(ctx, op_type, x, [a], True)
    return x if keepdim else ctx.op("Squeeze", x, ctx.ints(sorted(axes)))


def _long_axis(ctx, op_type, x: str, shape, a: int, dtype) -> str:
    """Sum (mean) along axis ``a`` of length n > _ONE_PASS_MAX, kept as a dim of 1: the first q*b elements as q
    blocks of b = isqrt(n) (each block summed, then the block sums), plus the r < b left over."""
    n = shape[a]
    b = math.isqrt(n)
    q, r = divmod(n, b)
    head = x if r == 0 else ctx.op("Slice", x, ctx.ints([0]), ctx.ints([q * b]), ctx.ints([a]))
    blocks = ctx.op("Reshape", head, ctx.ints([0] * a + [q, b] + list(shape[a + 1:])))  # 0: the input's size
    total = ctx.op("ReduceSum", ctx.op("ReduceSum", blocks, ctx.ints([a + 1]), keepdims=0), ctx.ints([a]), keepdims=1)
    if r:
        tail = ctx.op("Slice", x, ctx.ints([q * b]), ctx.ints([n]), ctx.ints([a]))
        total = ctx.op("Add", total, ctx.op("ReduceSum", tail, ctx.ints([a]), keepdims=1))
    return ctx.op("Div", total, ctx.const(float(n), dtype)) if op_type == "ReduceMean" else total


def _check_sum(node):
    if node.kwargs.get("dtype") is not None and node.kwargs["dtype"] != node.meta["val"].dtype:
        return "dtype argument"
    return None


# A bool sum (counting: ``(scores > t).sum()``) is ATen's int64 sum of the cast flags.
@lowering(aten.sum.dim_IntList, aten.sum.default, dtypes=ANY, check=_check_sum)
def lower_sum(ctx, node):
    x = node.args[0]
    dim = node.args[1] if len(node.args) > 1 else None
    keepdim = node.args[2] if len(node.args) > 2 else node.kwargs.get("keepdim", False)
    if _may_pass_2_53(ctx, x, _axes(ctx, x, dim), ctx.dtype(node)):
        return _exact_integer_sum(ctx, x, _axes(ctx, x, dim), bool(keepdim))
    return _reduce(ctx, "ReduceSum", x, dim, keepdim, ctx.dtype(node))


# ONNX Runtime's CPU ReduceSum rounds an int64 sum once it passes 2**53 (its result is that of a float64
# accumulation: 2**53 + 1 + 2 came out 2**53 + 2). CumSum keeps exact int64 running sums, so an integer sum that
# could pass 2**53 is the last element of one. Counts (bool) and small integer types cannot get there.
def _may_pass_2_53(ctx, x, axes, out_dtype) -> bool:
    in_dtype = ctx.dtype(x)
    if out_dtype != torch.int64 or in_dtype == torch.bool or in_dtype.is_floating_point or len(ctx.shape(x)) == 0:
        return False
    count = 1
    for a in axes:
        count *= ctx.shape(x)[a]
    return count * max(-torch.iinfo(in_dtype).min, torch.iinfo(in_dtype).max) >= 2 ** 53


def _exact_integer_sum(ctx, x, axes, keepdim):
    # Along each reduced axis in turn: the running sum's last element. No size is written into the graph, so a
    # partition with dynamic sizes keeps one engine for its range (engines/ranges.py).
    shape = ctx.shape(x)
    if 0 in shape:  # an empty sum is 0, as in ATen (the last running sum of an empty axis is nothing)
        out_shape = [1 if a in axes else n for a, n in enumerate(shape)] if keepdim else \
            [n for a, n in enumerate(shape) if a not in axes]
        return ctx.op("Identity", ctx.tensor_const(torch.zeros(out_shape, dtype=torch.int64)))
    total = ctx.input(x, torch.int64)
    for axis in axes:
        running = ctx.op("CumSum", total, ctx.const(axis, torch.int64))
        total = ctx.op("Slice", running, ctx.ints([-1]), ctx.ints([2 ** 63 - 1]), ctx.ints([axis]))
    return total if keepdim else ctx.op("Squeeze", total, ctx.ints(axes))


@lowering(aten.mean.dim, aten.mean.default, dtypes=FLOAT,
          check=lambda node: _check_sum(node) or _check_nonempty(node))
def lower_mean(ctx, node):
    dim = node.args[1] if len(node.args) > 1 else None
    keepdim = node.args[2] if len(node.args) > 2 else node.kwargs.get("keepdim", False)
    x = node.args[0]
    if ctx.target != ORT_CPU and ctx.dtype(node) in _POOL_DTYPES and _over_spatial_dims(ctx, x, dim) and \
            _count(ctx.shape(x), _axes(ctx, x, dim)) <= _ONE_PASS_MAX:
        return _global_average(ctx, ctx.input(x, ctx.dtype(node)), len(ctx.shape(x)), keepdim)
    return _reduce(ctx, "ReduceMean", x, dim, keepdim, ctx.dtype(node))


# float32 alone: where it was measured. float16 keeps ReduceMean, whose CUDA kernel accumulates in float32 (the
# pool's accumulation over a large plane, and its NHWC form under prefer_nhwc, were not checked on a GPU).
_POOL_DTYPES = (torch.float32,)


def _over_spatial_dims(ctx, x, dim) -> bool:
    rank = len(ctx.shape(x))
    return rank >= 3 and dim not in (None, []) and sorted(_axes(ctx, x, dim)) == list(range(2, rank))


# A mean over every dim after (N, C): a global pool, and captured graphs have it so (adaptive_avg_pool2d(x, 1) and
# squeeze-excitation blocks decompose to mean.dim([-1, -2])). On CUDA, GlobalAveragePool is cuDNN's averaging
# pool and ReduceMean a generic reduction: MobileNetV3-L's nine squeeze-excitation pools at fp32 batch 16 on the
# H200 took 68 against 54 us per call (cudagraphs_h200.md, session 37). On ONNX Runtime's CPU provider they
# timed the same, so ORT_CPU keeps ReduceMean.
def _global_average(ctx, x: str, rank: int, keepdim) -> str:
    pooled = ctx.op("GlobalAveragePool", x)
    return pooled if keepdim else ctx.op("Squeeze", pooled, ctx.ints(list(range(2, rank))))


# max()/min() without a dim (the largest score of a detection head, say) reduce over everything, as amax/amin do.
@lowering(aten.amax.default, aten.amin.default, aten.max.default, aten.min.default, dtypes=NUMERIC)
def lower_amax_amin(ctx, node):
    op_type = "ReduceMax" if node.target in (aten.amax.default, aten.max.default) else "ReduceMin"
    x = node.args[0]
    dim = node.args[1] if len(node.args) > 1 else []
    keepdim = node.args[2] if len(node.args) > 2 else node.kwargs.get("keepdim", False)
    values = _reduce(ctx, op_type, x, dim, keepdim)
    if not ctx.dtype(x).is_floating_point or not ctx.shape(x):
        return values
    has_nan = ctx.op("ReduceMax", nan_mask(ctx, ctx.input(x), ctx.dtype(x)), axes=_axes(ctx, x, dim),
                     keepdims=int(bool(keepdim)))
    return where_nan(ctx, has_nan, ctx.dtype(x), None, values)


def _check_not_0d(node):
    val = node.args[0].meta.get("val")
    if isinstance(val, torch.Tensor) and val.dim() == 0:  # ONNX ArgMax/ArgMin/CumSum need rank >= 1
        return "0-d input"
    return None


def _check_nonempty(node):
    val = node.args[0].meta.get("val")
    if isinstance(val, torch.Tensor) and val.numel() == 0:  # ATen gives NaN, ONNX Runtime's ReduceMean 0
        return "mean over an empty tensor"
    return None


@lowering(aten.max.dim, aten.min.dim, dtypes=NUMERIC, check=_check_not_0d)
def lower_max_min_dim(ctx, node):
    is_max = node.target is aten.max.dim
    x, dim = node.args[:2]
    keepdim = node.args[2] if len(node.args) > 2 else node.kwargs.get("keepdim", False)
    axis = dims(ctx.arg(dim), len(ctx.shape(x)))[0]
    values = _reduce(ctx, "ReduceMax" if is_max else "ReduceMin", x, [axis], keepdim)
    indices = ctx.op("ArgMax" if is_max else "ArgMin", ctx.input(x), axis=axis, keepdims=int(bool(keepdim)))
    if not ctx.dtype(x).is_floating_point:
        return (values, indices)
    has_nan, first_nan = _nan_along(ctx, x, axis, keepdim)
    dtype = ctx.dtype(x)
    return (where_nan(ctx, has_nan, dtype, None, values), where_nan(ctx, has_nan, dtype, first_nan, indices))


def _nan_along(ctx, x, axis: int, keepdim) -> tuple[str, str]:
    """(whether the reduced line holds a NaN, index of its first NaN) for a reduction along ``axis``: ATen's
    max/min/argmax/argmin answer NaN at the first NaN's index (ArgMax takes the first of equal maxima)."""
    mask = nan_mask(ctx, ctx.input(x), ctx.dtype(x))
    keep = int(bool(keepdim))
    return ctx.op("ReduceMax", mask, axes=[axis], keepdims=keep), ctx.op("ArgMax", mask, axis=axis, keepdims=keep)


def _check_arg(node):
    dim = node.args[1] if len(node.args) > 1 else None
    return "dim=None (flattened argmax)" if dim is None else _check_not_0d(node)


@lowering(aten.argmax.default, aten.argmin.default, dtypes=NUMERIC, check=_check_arg)
def lower_argmax(ctx, node):
    x, dim = node.args[:2]
    keepdim = node.args[2] if len(node.args) > 2 else node.kwargs.get("keepdim", False)
    axis = dims(ctx.arg(dim), len(ctx.shape(x)))[0]
    op_type = "ArgMax" if node.target is aten.argmax.default else "ArgMin"
    indices = ctx.op(op_type, ctx.input(x), axis=axis, keepdims=int(bool(keepdim)))
    if not ctx.dtype(x).is_floating_point:
        return indices
    has_nan, first_nan = _nan_along(ctx, x, axis, keepdim)
    return where_nan(ctx, has_nan, ctx.dtype(x), first_nan, indices)


@lowering(aten.var_mean.correction, aten.var.correction, dtypes=FLOAT, check=_check_nonempty)
def lower_var(ctx, node):
    x = node.args[0]
    dim = node.args[1] if len(node.args) > 1 else None
    correction = node.kwargs.get("correction", 1)
    correction = 1 if correction is None else ctx.arg(correction)
    keepdim = node.kwargs.get("keepdim", False)
    shape = ctx.shape(x)
    axes = dims(ctx.arg(dim), len(shape)) if dim not in (None, []) else list(range(len(shape)))
    count = _count(shape, axes)
    dtype = ctx.dtype(x)
    xin = ctx.input(x)
    if not shape:  # a 0-d input: its own mean, a variance of 0 (or NaN past the correction, as ATen's)
        mean_keep = ctx.op("Identity", xin)
        sq_sum = ctx.op("Sub", xin, xin)
    else:  # two passes, each staged where large (_float_sum): the centred squares lose nothing to the mean's size
        mean_keep = _float_sum(ctx, "ReduceMean", xin, shape, axes, True, dtype)
        centered = ctx.op("Sub", xin, mean_keep)
        sq_sum = _float_sum(ctx, "ReduceSum", ctx.op("Mul", centered, centered), shape, axes, keepdim, dtype)
    var = ctx.op("Div", sq_sum, ctx.const(float(max(count - correction, 0)), dtype))
    if node.target is aten.var.correction:
        return var
    mean = mean_keep if keepdim or not shape else ctx.op("Squeeze", mean_keep, ctx.ints(axes))
    return (var, mean)


# ATen's CPU cumsum of float32 keeps its running sum in float64, ONNX Runtime's CPU CumSum in float32: 0.1 added
# 200k times ended 40 below eager's 20000, and a cancelling sequence lost its value entirely. On ONNX Runtime's CPU
# provider the running sum is float64 too (its CumSum has a float64 kernel). CUDA's cumsum, in ATen and in ONNX
# Runtime, runs in float32, so other targets keep it.
# A bool input too: a mask's running count (DETR-style Fourier positional encodings, EdgeNeXt's among them,
# cumsum an all-ones mask; with symbolic sizes that mask is no constant, and declining split the block).
@lowering(aten.cumsum.default, dtypes=NUMERIC | BOOL, check=_check_not_0d)
def lower_cumsum(ctx, node):
    x, dim = node.args[:2]
    dtype = ctx.dtype(node)
    axis = dims(ctx.arg(dim), max(len(ctx.shape(x)), 1))[0]
    if ctx.target == ORT_CPU and dtype == torch.float32:
        wide = ctx.op("CumSum", ctx.input(x, torch.float64), ctx.const(axis, torch.int64))
        return ctx.cast(wide, dtype)
    return ctx.op("CumSum", ctx.input(x, dtype), ctx.const(axis, torch.int64))


@lowering(aten.prod.dim_int, dtypes=FLOAT)
def lower_prod(ctx, node):
    keepdim = node.args[2] if len(node.args) > 2 else node.kwargs.get("keepdim", False)
    return _reduce(ctx, "ReduceProd", node.args[0], [node.args[1]], keepdim, ctx.dtype(node))


# ONNX has no logical reduction: any(x) is the largest of the (non)zero flags as 0/1, all(x) is not any(not x).
# Float flags (4 bytes, not int64's 8: a mask over attention scores is large) and ReduceMax, whose result on an
# empty input is -inf, which gives ATen's answer there too (any: False, all: True).
@lowering(aten.any.dim, aten.any.dims, aten.any.default, aten.all.dim, aten.all.dims, aten.all.default, dtypes=ANY)
def lower_any_all(ctx, node):
    is_any = node.target in (aten.any.dim, aten.any.dims, aten.any.default)
    x = node.args[0]
    dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim")
    keepdim = node.args[2] if len(node.args) > 2 else node.kwargs.get("keepdim", False)
    xin = ctx.input(x)
    flags = ctx.cast(xin, torch.bool) if ctx.dtype(x) != torch.bool else xin  # ONNX: 0 -> False, else (NaN) True
    if not is_any:
        flags = ctx.op("Not", flags)
    counted = ctx.cast(flags, torch.float32)
    rank = len(ctx.shape(x))
    axes = list(range(rank)) if dim is None else dims(ctx.arg(dim), rank)  # any.dims(x, []) reduces nothing
    if rank and axes:
        counted = ctx.op("ReduceMax", counted, axes=axes, keepdims=int(bool(keepdim)))  # opset 17: an attribute
    found = ctx.op("Greater", counted, ctx.const(0.0, torch.float32))
    return found if is_any else ctx.op("Not", found)
