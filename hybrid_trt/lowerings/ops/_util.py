"""Small checks shared by the lowering modules."""
from __future__ import annotations

import operator
from typing import Optional

import torch
import torch.fx as fx


def only_first_output_used(node: fx.Node) -> Optional[str]:
    """For ops returning a tuple of which the delegate computes just element 0 (e.g. batch-norm statistics)."""
    for user in node.users:
        if user.target is not operator.getitem or user.args[1] != 0:
            return "uses a secondary output (statistics/indices) the ONNX op does not produce"
    return None


def rank_between(node: fx.Node, lo: int, hi: int, arg: int = 0) -> Optional[str]:
    val = node.args[arg].meta.get("val")
    if not isinstance(val, torch.Tensor) or not lo <= val.dim() <= hi:
        return f"input rank must be {lo}..{hi}"
    return None


def out_val(node: fx.Node):
    return node.meta.get("val")


def dims(dim, rank: int) -> list[int]:
    if dim is None:
        return list(range(rank))
    if isinstance(dim, int):
        dim = [dim]
    return [d % rank if rank else 0 for d in dim]


def reshape(ctx, name: str, shape) -> str:
    """Reshape to a concrete shape. A 0 in ONNX's shape input means "copy that input dimension" unless
    ``allowzero`` is set; here every entry is an exact size, zero-size dimensions included."""
    shape = [int(s) for s in shape]
    return ctx.op("Reshape", name, ctx.ints(shape), allowzero=1 if 0 in shape else None)


# ONNX Runtime's MaxPool, ReduceMax/ReduceMin and ArgMax/ArgMin skip a NaN or not depending on where it sits in
# the window, while ATen propagates it (arg-reductions: the index of the first NaN). So the NaN mask is reduced
# with the same window alongside the values, and where it is set the ATen answer is selected.
def nan_mask(ctx, x: str, dtype: torch.dtype) -> str:
    """1 where ``x`` is NaN, else 0, in ``x``'s float dtype, so the values' own pooling/reduction op applies to it
    (MaxPool's padding never counts, so padding cannot create a NaN)."""
    return ctx.cast(ctx.op("IsNaN", x), dtype)


def where_nan(ctx, reduced_mask: str, dtype: torch.dtype, if_nan: str | None, otherwise: str) -> str:
    """``if_nan`` (default: NaN) where the max-reduced NaN mask is set, else ``otherwise``."""
    if if_nan is None:
        if_nan = ctx.const(float("nan"), dtype)
    return ctx.op("Where", ctx.op("Greater", reduced_mask, ctx.const(0.0, dtype)), if_nan, otherwise)
