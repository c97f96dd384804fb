"""Max / average / adaptive-average pooling (2-D, and 3-D for video models; 1-D reaches ATen as 2-D)."""
from __future__ import annotations

import torch
import torch.fx as fx

from ..context import ORT_CPU
from ..registry import FLOAT, lowering
from ._util import nan_mask, only_first_output_used, where_nan

aten = torch.ops.aten


# Spatial dims per op: from the op itself, never from traced metas (a recipe read back from the engine store has
# none), and an ATen window argument may be one int for every dim.
_SPATIAL = {aten.max_pool2d_with_indices.default: 2, aten.max_pool3d_with_indices.default: 3,
            aten.avg_pool2d.default: 2, aten.avg_pool3d.default: 3,
            aten._adaptive_avg_pool2d.default: 2, aten._adaptive_avg_pool3d.default: 3}


def _ntuple(v, n: int) -> list:
    v = [int(e) for e in v]
    return v * n if len(v) == 1 else v


def _window(ctx, n: int, kernel, stride, padding) -> dict:
    """ATen pooling window arguments as ONNX attributes (an empty stride means stride = kernel)."""
    kernel = _ntuple(ctx.arg(kernel), n)
    stride = _ntuple(ctx.arg(stride), n) if stride else kernel
    padding = _ntuple(ctx.arg(padding), n) if padding is not None else [0] * n
    return dict(kernel_shape=kernel, strides=stride, pads=padding + padding)


def _rank_check(node) -> str | None:
    x, n = node.args[0].meta.get("val"), _SPATIAL[node.target]
    if x is None or x.dim() != n + 2:
        return f"only {n + 2}-D (N, C, {', '.join('DHW'[3 - n:])}) inputs"
    return None


def _check_max_pool(node):
    return _rank_check(node) or only_first_output_used(node)


@lowering(aten.max_pool2d_with_indices.default, aten.max_pool3d_with_indices.default, dtypes=FLOAT,
          check=_check_max_pool)
def lower_max_pool(ctx, node):
    args = list(node.args) + [None] * (6 - len(node.args))
    x, kernel, stride, padding, dilation, ceil_mode = args[:6]
    n = _SPATIAL[node.target]
    dilation = _ntuple(ctx.arg(dilation), n) if dilation is not None else [1] * n
    attrs = dict(_window(ctx, n, kernel, stride, padding), dilations=dilation, ceil_mode=int(bool(ceil_mode)))
    xin, dtype = ctx.input(x), ctx.dtype(x)
    out = ctx.op("MaxPool", xin, **attrs)
    if ctx.target == ORT_CPU and dtype == torch.float32 and n == 2:
        return (ctx.op("Mul", out, _mlas_window_factor(ctx, node, attrs)), None)
    nan_in_window = ctx.op("MaxPool", nan_mask(ctx, xin, dtype), **attrs)
    if not _nonnegative(x):
        # ONNX Runtime's MaxPool (CPU and CUDA, seen on the H200) gives -FLT_MAX for a window of -inf only: such a
        # window is one where no element is above -inf (a NaN is not either, but the NaN mask wins). A producer
        # that never gives -inf (ResNet's stem: ReLU) needs no repair: it saves a third pool and three full-size
        # passes, ~1.5% of ResNet-50's fp32 batch-16 partition on the H200 (cudagraphs_h200.md, session 37).
        neg_inf = ctx.const(float("-inf"), dtype)
        above = ctx.op("MaxPool", ctx.cast(ctx.op("Greater", xin, neg_inf), dtype), **attrs)
        out = ctx.op("Where", ctx.op("Greater", above, ctx.const(0.0, dtype)), out, neg_inf)
    return (where_nan(ctx, nan_in_window, dtype, None, out), None)


# ONNX Runtime's CPU MaxPool drops a NaN unless it is the last element of its window (x86 max returns the second
# operand when one is NaN), and gives -FLT_MAX, not -inf, for a window of -inf only. The generic repair above
# (IsNaN, Cast, Where) costs little by itself, but those operators have no NCHWc form: ONNX Runtime's layout pass
# then reorders the full activation out of and back into its blocked layout around them (ResNet's stem: three
# reorders of 1x64x112x112, 1.5-2.7 ms). Here the repair is built from operators that pass keeps blocked:
# depthwise convolutions with a fused Clip and a Mul. The result is MaxPool * factor, factor 1 for an ordinary
# window (exact, -0 kept), NaN for a window holding a NaN, 2 for a window of -inf only (-FLT_MAX * 2 = -inf). A
# convolution's sum propagates a NaN from any position; the fused Clip keeps it because MLAS clamps as
# min(hi, max(lo, v)) with v second (checked on every lane and position by tests/test_lowerings.py; CUDA's
# fminf/fmaxf would drop it, hence ORT_CPU only).
def _mlas_window_factor(ctx, node, attrs) -> str:
    x = node.args[0]
    c, h, w = ctx.shape(x)[1:]
    oh, ow = (int(s) for s in ctx.val(node)[0].shape[2:])
    (kh, kw), (sh, sw), (dh, dw) = attrs["kernel_shape"], attrs["strides"], attrs["dilations"]
    ph, pw = attrs["pads"][:2]
    # A convolution has no ceil_mode: its end padding grows to reach ceil_mode's last window. Padding reads as 0
    # below, which stands for "no element" (ATen pads a max pool with -inf), so it never changes the factor.
    end_h = ph + max(0, (oh - 1) * sh + dh * (kh - 1) + 1 - (h + 2 * ph))
    end_w = pw + max(0, (ow - 1) * sw + dw * (kw - 1) + 1 - (w + 2 * pw))
    window = dict(group=c, strides=[sh, sw], dilations=[dh, dw], pads=[ph, pw, end_h, end_w])
    lo, hi = ctx.const(0.0, torch.float32), ctx.const(1.0, torch.float32)

    def conv(v, weight: float, bias: float, kernel=(1, 1), conv_attrs=None) -> str:  # depthwise, constant weights
        return ctx.op("Conv", v, ctx.tensor_const(torch.full((c, 1, *kernel), weight)),
                      ctx.tensor_const(torch.full((c,), bias)), **(conv_attrs or dict(group=c)))

    if _nonnegative(x):
        # No -inf and no negative sum: window sum + 1 is >= 1 (+inf included), clipped to 1, or NaN.
        return ctx.op("Clip", conv(ctx.input(x), 1.0, 1.0, (kh, kw), window), lo, hi)
    # f = clip(2^-64 x + 2^64, 0, 1): 0 for -inf, 1 for every other value (2^-64 * -FLT_MAX + 2^64 = 2^40; the
    # scale also keeps products of ordinary values clear of subnormals, which are slow), NaN for NaN. Then
    # 2 - sum(f) is 2 for a window of -inf only and <= 1 otherwise: clipped to [1, 2].
    f = ctx.op("Clip", conv(ctx.input(x), 2.0 ** -64, 2.0 ** 64), lo, hi)
    return ctx.op("Clip", conv(f, -1.0, 2.0, (kh, kw), window), hi, ctx.const(2.0, torch.float32))


# Producers whose value ONNX Runtime computes as >= 0 or NaN, so a window sum of it is never NaN without a NaN.
_NONNEGATIVE = (aten.relu.default, aten.sigmoid.default, aten.hardsigmoid.default)
_LOWER_BOUND_ARG = {aten.clamp.default: (1, "min"), aten.clamp_min.default: (1, "min"),
                    aten.hardtanh.default: (1, "min_val")}


def _nonnegative(x) -> bool:
    if not isinstance(x, fx.Node) or x.op != "call_function":
        return False
    if x.target in _NONNEGATIVE:
        return True
    if x.target not in _LOWER_BOUND_ARG:
        return False
    index, name = _LOWER_BOUND_ARG[x.target]
    low = x.args[index] if len(x.args) > index else x.kwargs.get(name, -1.0 if name == "min_val" else None)
    return isinstance(low, (int, float)) and not isinstance(low, bool) and low >= 0


def _check_avg_pool(node):
    x, out = node.args[0].meta.get("val"), node.meta.get("val")
    if _rank_check(node) or out is None:
        return _rank_check(node) or "no traced output"
    window = [v for a in node.args[1:4] if isinstance(a, (list, tuple)) for v in a]
    if not all(isinstance(v, int) for v in window):
        return "pooling window given by symbolic sizes"
    if not _needs_divisor(node):
        return None
    if any(not isinstance(d, int) for d in (*x.shape[2:], *out.shape[2:])):
        return "ceil_mode or divisor_override average pooling with symbolic spatial sizes"
    if min(_end_pads(node, x.shape[2:], out.shape[2:])) < 0:
        return "ceil_mode average pooling whose last window ends before the input (stride > kernel)"
    return None


def _avg_args(node) -> list:
    args, n = list(node.args) + [None] * (7 - len(node.args)), _SPATIAL[node.target]
    kernel = _ntuple(args[1], n)
    return [args[0], kernel, _ntuple(args[2], n) if args[2] else kernel,
            _ntuple(args[3], n) if args[3] is not None else [0] * n,
            bool(args[4]), True if args[5] is None else bool(args[5]), args[6]]


def _needs_divisor(node) -> bool:
    *_, ceil_mode, _include, divisor = _avg_args(node)
    return ceil_mode or divisor is not None


def _end_pads(node, in_hw, out_hw) -> list:
    """End padding per spatial dim that makes a plain window sweep produce ATen's (ceil_mode) output size."""
    _x, kernel, stride, padding = _avg_args(node)[:4]
    return [(int(o) - 1) * s + k - int(i) - p for i, o, k, s, p in zip(in_hw, out_hw, kernel, stride, padding)]


@lowering(aten.avg_pool2d.default, aten.avg_pool3d.default, dtypes=FLOAT, check=_check_avg_pool)
def lower_avg_pool(ctx, node):
    x, kernel, stride, padding, _ceil, include, _divisor = _avg_args(node)
    if _needs_divisor(node):  # ceil_mode or divisor_override: ONNX's windows differ from ATen's there
        return _avg_pool_with_divisor(ctx, node)
    return ctx.op("AveragePool", ctx.input(x), kernel_shape=kernel, strides=stride, pads=padding + padding,
                  count_include_pad=int(include))


def _avg_pool_with_divisor(ctx, node):
    """ATen's sum over each window divided by ATen's own divisor: the input zero-padded so that plain windows
    reach ceil_mode's last one, averaged over the full window, times a constant per output position (the full
    window's size over ATen's divisor, computed by ATen itself on ones of the input's spatial shape)."""
    x, kernel, stride, padding, ceil_mode, include, divisor = _avg_args(node)
    # The shapes from the lowering context: a recipe read back from the engine store has no traced metas.
    size, dtype = ctx.shape(x)[2:], ctx.dtype(x)
    end = _end_pads(node, size, ctx.shape(node)[2:])
    avg_pool = {2: torch.nn.functional.avg_pool2d, 3: torch.nn.functional.avg_pool3d}[len(size)]
    ones = torch.ones(1, 1, *size, dtype=torch.float64)
    aten_mean = avg_pool(ones, kernel, stride, padding, ceil_mode, include, divisor)
    torch_pad = [p for d in reversed(range(len(size))) for p in (padding[d], end[d])]  # last dim first
    full_mean = avg_pool(torch.nn.functional.pad(ones, torch_pad), kernel, stride)  # valid share of each window
    factor = torch.where(full_mean > 0, aten_mean / full_mean.clamp_min(1e-300), torch.zeros(()))
    xin = ctx.input(x)
    if any((*padding, *end)):
        xin = ctx.op("Pad", xin, ctx.ints([0, 0, *padding, 0, 0, *end]), ctx.const(0.0, dtype), mode="constant")
    out = ctx.op("AveragePool", xin, kernel_shape=kernel, strides=stride)
    if torch.equal(factor, torch.ones_like(factor)):
        return out
    return ctx.op("Mul", out, ctx.tensor_const(factor.to(dtype)))


_MAX_WINDOWS = 64  # adaptive pooling by windows: at most this many output rows + columns (one Slice each)


def _check_adaptive(node):
    x = node.args[0].meta.get("val")
    if _rank_check(node):
        return _rank_check(node)
    out = [int(o) for o in node.args[1]]
    if sum(out) <= _MAX_WINDOWS or all(o == 1 for o in out):
        return None
    # Sizes read as plain ints only: int() of a symbolic size would specialise it (a dynamic dimension of an
    # export became a constant there, and its range check was lost).
    size = x.shape[2:]
    if not all(isinstance(d, int) for d in size):
        return f"a dynamic input size, and over {_MAX_WINDOWS} output rows and columns (windows unknown until run)"
    if any(s % o for s, o in zip(size, out)):
        return f"output size does not divide the input size, and over {_MAX_WINDOWS} output rows and columns"
    return None


@lowering(aten._adaptive_avg_pool2d.default, aten._adaptive_avg_pool3d.default, dtypes=FLOAT,
          check=_check_adaptive)
def lower_adaptive_avg_pool(ctx, node):
    x, out = node.args[0], [int(o) for o in ctx.arg(node.args[1])]
    if all(o == 1 for o in out):
        return ctx.op("GlobalAveragePool", ctx.input(x))
    size = ctx.shape(x)[2:]
    if all(s % o == 0 for s, o in zip(size, out)):
        kernel = [s // o for s, o in zip(size, out)]
        return ctx.op("AveragePool", ctx.input(x), kernel_shape=kernel, strides=kernel)
    # A window is a product of per-axis windows of equal size along each axis: the mean of per-axis means.
    y = ctx.input(x)
    for axis, (s, o) in enumerate(zip(size, out), start=2):
        y = _adaptive_by_windows(ctx, y, axis, s, o)
    return y


def _adaptive_by_windows(ctx, x: str, axis: int, size: int, out: int) -> str:
    """ATen's adaptive windows along ``axis`` (output i averages [floor(i*size/out), ceil((i+1)*size/out))), one
    Slice and ReduceMean each, concatenated. The mean of row means is the window's mean; unlike an averaging matrix
    (a MatMul), a NaN or inf reaches only the windows that hold it."""
    means = [ctx.op("ReduceMean", ctx.op("Slice", x, ctx.ints([i * size // out]), ctx.ints([-(-(i + 1) * size // out)]),
                                         ctx.ints([axis])), axes=[axis], keepdims=1) for i in range(out)]
    return means[0] if out == 1 else ctx.op("Concat", *means, axis=axis)
