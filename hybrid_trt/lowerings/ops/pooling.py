"""Max / average / adaptive-average pooling (2-D)."""
from __future__ import annotations

import torch
import torch.fx as fx

from ..context import ORT_CPU
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
    if ctx.target == ORT_CPU and dtype == torch.float32:
        return (ctx.op("Mul", out, _mlas_window_factor(ctx, node, attrs)), None)
    nan_in_window = ctx.op("MaxPool", nan_mask(ctx, xin, dtype), **attrs)
    # ONNX Runtime's MaxPool (CPU and CUDA, seen on the H200) gives -FLT_MAX for a window of -inf only: such a
    # window is one where no element is above -inf (a NaN is not either, but the NaN mask wins).
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
