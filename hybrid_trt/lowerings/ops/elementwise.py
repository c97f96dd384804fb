"""Elementwise arithmetic, comparisons, logic, where, casts and unary math.

ATen promotes mixed dtypes implicitly; ONNX does not, so every lowering casts its operands to the dtype ATen
computes in (the output dtype for arithmetic, the promoted input dtype for comparisons).
"""
from __future__ import annotations

import math

import torch
from torch.fx import Node

from ..registry import ANY, BOOL, FLOAT, NUMERIC, SIGNED, lowering

aten = torch.ops.aten
prims = torch.ops.prims


def _compute_dtype(ctx, node: Node) -> torch.dtype:
    a, b = (ctx.val(x) for x in node.args[:2])
    return torch.result_type(a, b)


def _binary(op_type: str, *targets, dtypes=NUMERIC):
    def lower(ctx, node):
        dtype = ctx.dtype(node)
        return ctx.op(op_type, ctx.input(node.args[0], dtype), ctx.input(node.args[1], dtype))
    lower.__name__ = f"lower_{op_type.lower()}"
    return lowering(*targets, dtypes=dtypes)(lower)




@lowering(aten.mul.Tensor, aten.mul.Scalar, dtypes=ANY)
def lower_mul(ctx, node):
    dtype = ctx.dtype(node)
    op_type = "And" if dtype == torch.bool else "Mul"  # bool * bool is a logical and in ATen
    return ctx.op(op_type, ctx.input(node.args[0], dtype), ctx.input(node.args[1], dtype))


_binary("Max", aten.maximum.default)
_binary("Min", aten.minimum.default)
_binary("Pow", aten.pow.Tensor_Tensor, aten.pow.Scalar, dtypes=FLOAT)


# ATen computes x ** 0.5 as sqrt(x) and x ** -0.5 as rsqrt(x), which differ from pow at -inf (NaN, not inf).
@lowering(aten.pow.Tensor_Scalar, dtypes=FLOAT)
def lower_pow_scalar(ctx, node):
    dtype = ctx.dtype(node)
    x, exponent = ctx.input(node.args[0], dtype), node.args[1]
    if exponent in (0.5, -0.5):
        root = ctx.op("Sqrt", x)
        return root if exponent > 0 else ctx.op("Reciprocal", root)
    return ctx.op("Pow", x, ctx.input(exponent, dtype))


def _alpha_scaled(ctx, node, dtype):
    other = ctx.input(node.args[1], dtype)
    alpha = node.kwargs.get("alpha", 1)
    if alpha != 1:
        other = ctx.op("Mul", other, ctx.const(alpha, dtype))
    return other


@lowering(aten.add.Tensor, aten.add.Scalar, dtypes=NUMERIC)
def lower_add(ctx, node):
    dtype = ctx.dtype(node)
    return ctx.op("Add", ctx.input(node.args[0], dtype), _alpha_scaled(ctx, node, dtype))


@lowering(aten.sub.Tensor, aten.sub.Scalar, dtypes=NUMERIC)
def lower_sub(ctx, node):
    dtype = ctx.dtype(node)
    return ctx.op("Sub", ctx.input(node.args[0], dtype), _alpha_scaled(ctx, node, dtype))


# Not decomposed at capture (Inductor has kernels of its own for them), so without a lowering each one split a
# block in two: ConvNeXt-V2's GRN layer is an addcmul per block.
@lowering(aten.addcmul.default, dtypes=NUMERIC)
def lower_addcmul(ctx, node):
    return _add_scaled_product(ctx, node, "Mul")


@lowering(aten.addcdiv.default, dtypes=FLOAT)
def lower_addcdiv(ctx, node):
    return _add_scaled_product(ctx, node, "Div")


def _add_scaled_product(ctx, node, op_type: str) -> str:
    """self + value * tensor1 op tensor2, in ATen's order: (value * tensor1) op tensor2."""
    dtype = ctx.dtype(node)
    a, t1, t2 = (ctx.input(x, dtype) for x in node.args[:3])
    value = ctx.arg(node.args[3] if len(node.args) > 3 else node.kwargs.get("value", 1))
    if value != 1:
        t1 = ctx.op("Mul", ctx.const(value, dtype), t1)
    return ctx.op("Add", a, ctx.op(op_type, t1, t2))


@lowering(aten.rsub.Scalar, aten.rsub.Tensor, dtypes=NUMERIC)
def lower_rsub(ctx, node):
    # rsub(a, b, alpha) = b - alpha * a
    dtype = ctx.dtype(node)
    scaled = ctx.input(node.args[0], dtype)
    alpha = node.kwargs.get("alpha", 1)
    if alpha != 1:
        scaled = ctx.op("Mul", scaled, ctx.const(alpha, dtype))
    return ctx.op("Sub", ctx.input(node.args[1], dtype), scaled)


def _check_div(node):
    mode = node.kwargs.get("rounding_mode")
    if mode not in (None, "floor", "trunc"):
        return f"rounding_mode {mode!r}"
    return None


@lowering(aten.div.Tensor, aten.div.Scalar, aten.div.Tensor_mode, aten.div.Scalar_mode, dtypes=NUMERIC,
          check=_check_div)
def lower_div(ctx, node):
    dtype = ctx.dtype(node)
    mode = node.kwargs.get("rounding_mode")
    if mode is not None and not dtype.is_floating_point:
        return ctx.cast(_integer_division(ctx, node.args[0], node.args[1], mode), dtype)
    if mode == "floor":
        return _float_floor_division(ctx, ctx.input(node.args[0], dtype), ctx.input(node.args[1], dtype), dtype)
    q = ctx.op("Div", ctx.input(node.args[0], dtype), ctx.input(node.args[1], dtype))
    if mode == "trunc":
        return _trunc(ctx, q)
    return q


def _inexact_with_other_sign(ctx, mod: str, b: str, zero: str) -> str:
    """Where the C remainder ``mod`` (fmod, a's sign) is nonzero and its sign differs from the divisor ``b``'s:
    there ATen's floor division is one less and its remainder is ``mod + b``."""
    return ctx.op("And", ctx.op("Not", ctx.op("Equal", mod, zero)),
                  ctx.op("Xor", ctx.op("Less", b, zero), ctx.op("Less", mod, zero)))


def _float_floor_division(ctx, a: str, b: str, dtype: torch.dtype) -> str:
    """ATen's (and Python's) float floor division, not floor(a / b): 1.0 // 0.1 is 9 (a / b rounds up to 10), and
    inf // 3 is NaN. A voxel index `(x - lo) // size` lands in eager's voxel at the boundaries this way."""
    zero, one = ctx.const(0.0, dtype), ctx.const(1.0, dtype)
    mod = ctx.op("Mod", a, b, fmod=1)
    div = ctx.op("Div", ctx.op("Sub", a, mod), b)
    div = ctx.op("Where", _inexact_with_other_sign(ctx, mod, b, zero), ctx.op("Sub", div, one), div)
    floor = ctx.op("Floor", div)
    floor = ctx.op("Where", ctx.op("Greater", ctx.op("Sub", div, floor), ctx.const(0.5, dtype)),
                   ctx.op("Add", floor, one), floor)
    # By zero: a / b (inf or NaN). (ATen also gives a zero quotient a / b's sign; -0.0 and 0.0 compare equal.)
    return ctx.op("Where", ctx.op("Equal", b, zero), ctx.op("Div", a, b), floor)


def _integer_division(ctx, a, b, mode: str) -> str:
    """ATen's integer floor/trunc division, exact in int64 (float64 rounds past 2**53: a voxel key or a hash).
    ONNX integer Div truncates. INT64_MIN / -1 traps in ONNX Runtime's CPU Div (SIGFPE, the process dies), so a
    divisor of -1 is replaced and the quotient is -a, which wraps as ATen's does. A divisor of 0 raises there, as
    in eager."""
    positive = isinstance(b, int) and b > 0  # a number, as in a top-k index's `idx // (h * w)`: fewer operators
    a, b = ctx.input(a, torch.int64), ctx.input(b, torch.int64)
    if positive:
        q = ctx.op("Div", a, b)
    else:
        minus_one = ctx.op("Equal", b, ctx.const(-1, torch.int64))
        q = ctx.op("Div", a, ctx.op("Where", minus_one, ctx.const(1, torch.int64), b))
        q = ctx.op("Where", minus_one, ctx.op("Neg", a), q)
    if mode == "trunc":
        return q
    # floor: one less where the division was inexact and the signs differ (the C remainder has a's sign)
    r = ctx.op("Mod", a, b, fmod=1)
    zero = ctx.const(0, torch.int64)
    if positive:
        inexact_negative = ctx.op("Less", r, zero)
    else:
        inexact_negative = _inexact_with_other_sign(ctx, r, b, zero)
    return ctx.op("Sub", q, ctx.cast(inexact_negative, torch.int64))


def _trunc(ctx, x):
    # ONNX has no Trunc: sign(x) * floor(|x|).
    return ctx.op("Mul", ctx.op("Sign", x), ctx.op("Floor", ctx.op("Abs", x)))


def _check_ordered(node: Node):
    a, b = (x.meta.get("val") if isinstance(x, Node) else x for x in node.args[:2])
    if torch.result_type(a, b) == torch.bool:  # ONNX Less/Greater(OrEqual) are not defined for bool
        return "ordering comparison of bool values"
    return None


def _comparison(op_type: str, *targets, negate=False):
    def lower(ctx, node):
        dtype = _compute_dtype(ctx, node)
        out = ctx.op(op_type, ctx.input(node.args[0], dtype), ctx.input(node.args[1], dtype))
        return ctx.op("Not", out) if negate else out
    lower.__name__ = f"lower_{op_type.lower()}{'_not' if negate else ''}"
    return lowering(*targets, dtypes=ANY, check=None if op_type == "Equal" else _check_ordered)(lower)


_comparison("Equal", aten.eq.Tensor, aten.eq.Scalar)
_comparison("Equal", aten.ne.Tensor, aten.ne.Scalar, negate=True)
_comparison("Less", aten.lt.Tensor, aten.lt.Scalar)
_comparison("LessOrEqual", aten.le.Tensor, aten.le.Scalar)
_comparison("Greater", aten.gt.Tensor, aten.gt.Scalar)
_comparison("GreaterOrEqual", aten.ge.Tensor, aten.ge.Scalar)


def _logical(op_type: str, *targets):
    def lower(ctx, node):
        return ctx.op(op_type, *(ctx.input(a, torch.bool) for a in node.args[:2]))
    lower.__name__ = f"lower_{op_type.lower()}"
    return lowering(*targets, dtypes=ANY)(lower)


_logical("And", aten.logical_and.default)
_logical("Or", aten.logical_or.default)
_logical("Xor", aten.logical_xor.default)


@lowering(aten.bitwise_and.Tensor, aten.bitwise_or.Tensor, dtypes=BOOL)
def lower_bool_bitwise(ctx, node):
    op_type = "And" if node.target is aten.bitwise_and.Tensor else "Or"
    return ctx.op(op_type, ctx.input(node.args[0]), ctx.input(node.args[1]))


@lowering(aten.logical_not.default, aten.bitwise_not.default, dtypes=BOOL)
def lower_not(ctx, node):
    return ctx.op("Not", ctx.input(node.args[0], torch.bool))


def _check_where(node: Node):
    val = node.meta.get("val")
    if isinstance(val, torch.Tensor) and val.dtype == torch.bool:
        return "where selecting bool values (ONNX Runtime has no bool Where kernel)"
    return None


@lowering(aten.where.self, aten.where.ScalarOther, aten.where.ScalarSelf, aten.where.Scalar, dtypes=ANY,
          check=_check_where)
def lower_where(ctx, node):
    dtype = ctx.dtype(node)
    cond, a, b = node.args
    return ctx.op("Where", ctx.input(cond, torch.bool), ctx.input(a, dtype), ctx.input(b, dtype))


def _check_to_copy(node):
    extra = set(node.kwargs) - {"dtype", "layout", "device", "memory_format", "pin_memory", "non_blocking"}
    if extra:
        return f"unsupported arguments {sorted(extra)}"
    src, out = node.args[0].meta.get("val"), node.meta.get("val")
    if src is not None and out is not None and src.device != out.device:
        return "changes device"
    return None


@lowering(aten._to_copy.default, prims.convert_element_type.default, dtypes=ANY, check=_check_to_copy)
def lower_cast(ctx, node):
    return ctx.cast(ctx.input(node.args[0]), ctx.dtype(node))


@lowering(aten.clone.default, aten.alias.default, aten.lift_fresh_copy.default, dtypes=ANY)
def lower_identity(ctx, node):
    return ctx.op("Identity", ctx.input(node.args[0]))


def _unary(op_type: str, *targets, dtypes=FLOAT):
    def lower(ctx, node):
        return ctx.op(op_type, ctx.input(node.args[0], ctx.dtype(node)))
    lower.__name__ = f"lower_{op_type.lower()}"
    return lowering(*targets, dtypes=dtypes)(lower)


_unary("Neg", aten.neg.default, dtypes=SIGNED)
_unary("Abs", aten.abs.default, dtypes=NUMERIC)
_unary("Exp", aten.exp.default)
_unary("Log", aten.log.default)
_unary("Sqrt", aten.sqrt.default)
_unary("Reciprocal", aten.reciprocal.default)
_unary("Erf", aten.erf.default)
_unary("Sin", aten.sin.default)
_unary("Cos", aten.cos.default)
_unary("Tan", aten.tan.default)
_unary("Atan", aten.atan.default)
_unary("Tanh", aten.tanh.default)
_unary("Floor", aten.floor.default)
_unary("Ceil", aten.ceil.default)
_unary("Round", aten.round.default)


@lowering(aten.trunc.default)
def lower_trunc(ctx, node):
    return _trunc(ctx, ctx.input(node.args[0], ctx.dtype(node)))


@lowering(aten.log2.default)
def lower_log2(ctx, node):
    dtype = ctx.dtype(node)
    return ctx.op("Div", ctx.op("Log", ctx.input(node.args[0], dtype)), ctx.const(math.log(2.0), dtype))


@lowering(aten.exp2.default)
def lower_exp2(ctx, node):
    dtype = ctx.dtype(node)
    return ctx.op("Pow", ctx.const(2.0, dtype), ctx.input(node.args[0], dtype))


def _check_float_input(node: Node):
    x = node.args[0].meta.get("val")
    return None if isinstance(x, torch.Tensor) and x.dtype.is_floating_point else "non-float input"


# ONNX IsNaN/IsInf take floats only; integers are never NaN or infinite (ATen answers False), so those stay with
# Inductor rather than being cast. IsInf takes float16 and bfloat16 only from opset 20 (we emit 17).
@lowering(aten.isnan.default, dtypes=FLOAT | BOOL, check=_check_float_input)
def lower_isnan(ctx, node):
    return ctx.op("IsNaN", ctx.input(node.args[0]))


@lowering(aten.isinf.default, dtypes={torch.float32, torch.float64, torch.bool}, check=_check_float_input)
def lower_isinf(ctx, node):
    return ctx.op("IsInf", ctx.input(node.args[0]))


@lowering(aten.rsqrt.default)
def lower_rsqrt(ctx, node):
    return ctx.op("Reciprocal", ctx.op("Sqrt", ctx.input(node.args[0], ctx.dtype(node))))


@lowering(aten.log1p.default)
def lower_log1p(ctx, node):
    dtype = ctx.dtype(node)
    return ctx.op("Log", ctx.op("Add", ctx.input(node.args[0], dtype), ctx.const(1.0, dtype)))


@lowering(aten.expm1.default)
def lower_expm1(ctx, node):
    dtype = ctx.dtype(node)
    return ctx.op("Sub", ctx.op("Exp", ctx.input(node.args[0], dtype)), ctx.const(1.0, dtype))


# fmod keeps the dividend's sign (C's fmod): ONNX Mod with fmod=1, for every type. Swin's shifted-window mask
# computes one.
@lowering(aten.fmod.Scalar, aten.fmod.Tensor, dtypes=NUMERIC)
def lower_fmod(ctx, node):
    dtype = ctx.dtype(node)
    return ctx.op("Mod", ctx.input(node.args[0], dtype), ctx.input(node.args[1], dtype), fmod=1)


@lowering(aten.remainder.Scalar, aten.remainder.Tensor, dtypes=NUMERIC)
def lower_remainder(ctx, node):
    dtype = ctx.dtype(node)
    a, b = ctx.input(node.args[0], dtype), ctx.input(node.args[1], dtype)
    if not dtype.is_floating_point:
        return ctx.op("Mod", a, b, fmod=0)  # integer Mod with fmod=0 has Python's sign convention, like ATen
    # Float: ATen's kernel, fmod moved to the divisor's sign when they differ. It is exact, where
    # a - floor(a / b) * b loses the remainder of a large quotient and gives NaN for 0 % inf.
    zero = ctx.const(0.0, dtype)
    mod = ctx.op("Mod", a, b, fmod=1)
    return ctx.op("Where", _inexact_with_other_sign(ctx, mod, b, zero), ctx.op("Add", mod, b), mod)


# ONNX Sign(NaN) is NaN; ATen's sign is (0 < x) - (x < 0), which is 0 for NaN.
@lowering(aten.sign.default, dtypes=NUMERIC)
def lower_sign(ctx, node):
    dtype = ctx.dtype(node)
    x = ctx.input(node.args[0], dtype)
    if not dtype.is_floating_point:
        return ctx.op("Sign", x)
    return ctx.op("Where", ctx.op("IsNaN", x), ctx.const(0.0, dtype), ctx.op("Sign", x))
