"""The activation family: relu and its relatives, gelu, silu, hard-* variants, clamps, softplus, mish."""
from __future__ import annotations

import math

import torch

from ..registry import FLOAT, NUMERIC, lowering

aten = torch.ops.aten


@lowering(aten.relu.default, dtypes=NUMERIC)
def lower_relu(ctx, node):
    x = ctx.input(node.args[0])
    dtype = ctx.dtype(node)
    if not dtype.is_floating_point:
        # ONNX Runtime's CPU provider has Relu kernels for float types only; Max has integer ones.
        return ctx.op("Max", x, ctx.const(0, dtype))
    return ctx.op("Relu", x)


@lowering(aten.sigmoid.default)
def lower_sigmoid(ctx, node):
    return ctx.op("Sigmoid", ctx.input(node.args[0]))


@lowering(aten.silu.default)
def lower_silu(ctx, node):
    x = ctx.input(node.args[0])
    return ctx.op("Mul", x, ctx.op("Sigmoid", x))


def _check_gelu(node):
    approx = node.kwargs.get("approximate", node.args[1] if len(node.args) > 1 else "none")
    return None if approx in ("none", "tanh") else f"approximate={approx!r}"


@lowering(aten.gelu.default, check=_check_gelu)
def lower_gelu(ctx, node):
    # Opset 17 has no Gelu op. The chains below are written exactly in the forms ONNX Runtime's optimizer fuses
    # into one Gelu / FastGelu kernel (GeluFusion wants Div by sqrt(2), FastGeluFusion Pow(x, 3)) and that
    # TensorRT's parser recognises; a Mul by 1/sqrt(2) or x*x*x computes the same but stays five to eight
    # separate passes over the tensor (convnext_tiny: 18 GELUs, 1.2x ONNX Runtime's time on the exported model).
    dtype = ctx.dtype(node)
    x = ctx.input(node.args[0])
    approx = node.kwargs.get("approximate", node.args[1] if len(node.args) > 1 else "none")
    half_x = ctx.op("Mul", x, ctx.const(0.5, dtype))
    if approx == "tanh":
        cube = ctx.op("Pow", x, ctx.const(3.0, dtype))
        inner = ctx.op("Add", x, ctx.op("Mul", cube, ctx.const(0.044715, dtype)))
        t = ctx.op("Tanh", ctx.op("Mul", inner, ctx.const(math.sqrt(2 / math.pi), dtype)))
    else:
        t = ctx.op("Erf", ctx.op("Div", x, ctx.const(math.sqrt(2), dtype)))
    return ctx.op("Mul", half_x, ctx.op("Add", t, ctx.const(1.0, dtype)))


@lowering(aten.hardswish.default)
def lower_hardswish(ctx, node):
    return ctx.op("HardSwish", ctx.input(node.args[0]))


@lowering(aten.hardsigmoid.default)
def lower_hardsigmoid(ctx, node):
    return ctx.op("HardSigmoid", ctx.input(node.args[0]), alpha=1 / 6, beta=0.5)


@lowering(aten.leaky_relu.default)
def lower_leaky_relu(ctx, node):
    slope = ctx.arg(node.args[1]) if len(node.args) > 1 else 0.01
    return ctx.op("LeakyRelu", ctx.input(node.args[0]), alpha=float(slope))


# SELU and CELU reach the graph as elu with a scale (SELU's gamma) or an input scale (CELU's 1/alpha).
@lowering(aten.elu.default)
def lower_elu(ctx, node):
    args = [ctx.arg(a) for a in node.args[1:4]]
    alpha, scale, input_scale = (float(a) for a in args + [1.0] * (3 - len(args)))
    x = ctx.input(node.args[0])
    if input_scale == 1:
        return ctx.op("Elu", x, alpha=alpha) if scale == 1 else ctx.op("Selu", x, alpha=alpha, gamma=scale)
    # ATen: x > 0 ? scale * x : scale * alpha * (exp(input_scale * x) - 1)
    dtype = ctx.dtype(node)
    negative = ctx.op("Mul", ctx.op("Sub", ctx.op("Exp", ctx.op("Mul", x, ctx.const(input_scale, dtype))),
                                    ctx.const(1.0, dtype)), ctx.const(alpha * scale, dtype))
    positive = ctx.op("Mul", x, ctx.const(scale, dtype)) if scale != 1 else x
    return ctx.op("Where", ctx.op("Greater", x, ctx.const(0.0, dtype)), positive, negative)


def _check_glu(node):
    x = node.args[0].meta.get("val")
    return None if isinstance(x, torch.Tensor) and x.dim() > 0 else "0-d input"


@lowering(aten.glu.default, check=_check_glu)
def lower_glu(ctx, node):
    """a * sigmoid(b), a and b the two halves of ``dim``."""
    x, dim = node.args[0], node.args[1] if len(node.args) > 1 else -1
    half = ctx.shape(x)[dim] // 2
    a, b = ctx.op("Split", ctx.input(x), ctx.ints([half, half]), axis=dim, outputs=2)
    return ctx.op("Mul", a, ctx.op("Sigmoid", b))


@lowering(aten.softplus.default)
def lower_softplus(ctx, node):
    beta = ctx.arg(node.args[1]) if len(node.args) > 1 else 1
    threshold = ctx.arg(node.args[2]) if len(node.args) > 2 else 20
    dtype = ctx.dtype(node)
    x = ctx.input(node.args[0])
    bx = ctx.op("Mul", x, ctx.const(float(beta), dtype))
    soft = ctx.op("Div", ctx.op("Softplus", bx), ctx.const(float(beta), dtype))
    # Above the threshold PyTorch returns x itself.
    return ctx.op("Where", ctx.op("Greater", bx, ctx.const(float(threshold), dtype)), x, soft)


@lowering(aten.mish.default)
def lower_mish(ctx, node):
    x = ctx.input(node.args[0])
    return ctx.op("Mul", x, ctx.op("Tanh", ctx.op("Softplus", x)))


def _clip(ctx, node, lo, hi):
    dtype = ctx.dtype(node)
    x = ctx.input(node.args[0], dtype)
    # Max/Min rather than Clip: Clip wants scalar bounds of the input dtype, ATen also allows tensor bounds.
    if lo is not None:
        x = ctx.op("Max", x, ctx.input(lo, dtype))
    if hi is not None:
        x = ctx.op("Min", x, ctx.input(hi, dtype))
    return x


def _arg(node, i, name, default=None):
    if len(node.args) > i:
        return node.args[i]
    return node.kwargs.get(name, default)


@lowering(aten.clamp.default, aten.clamp.Tensor, dtypes=NUMERIC)
def lower_clamp(ctx, node):
    return _clip(ctx, node, _arg(node, 1, "min"), _arg(node, 2, "max"))


@lowering(aten.clamp_min.default, aten.clamp_min.Tensor, dtypes=NUMERIC)
def lower_clamp_min(ctx, node):
    return _clip(ctx, node, node.args[1], None)


@lowering(aten.clamp_max.default, aten.clamp_max.Tensor, dtypes=NUMERIC)
def lower_clamp_max(ctx, node):
    return _clip(ctx, node, None, node.args[1])


@lowering(aten.hardtanh.default, dtypes=FLOAT)
def lower_hardtanh(ctx, node):
    return _clip(ctx, node, _arg(node, 1, "min_val", -1.0), _arg(node, 2, "max_val", 1.0))
