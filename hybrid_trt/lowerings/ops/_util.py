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


# Shape-generic targets. Lowering runs at concrete shapes (to_onnx.specialise), so a target written from
# ctx.shape(node) holds this shape's numbers, and a partition lowered at two points of a dynamic range differs in
# that initializer (engines/ranges.py then keeps engines per shape). The partition's own node.meta["val"] still
# holds the traced symbolic sizes, though, so a target can say what it means instead of what it is here: a dim
# that is the same size expression as the input's dim at that position is ONNX's 0 (Reshape: copy it; allowzero
# stays 0) or 1 (Expand: broadcast keeps the input's), and one remaining symbolic dim is Reshape's -1 (inferred
# from the element count). The result is the same at every point of the range and exact at each (equal
# expressions are equal sizes under the trace's guards). Only nodes with symbolic sizes take this form, so a
# static partition's graph, and its engine key, is unchanged. Each generic target is also checked against this
# point's concrete shapes, so a stale meta can only cost the generic form, never give a wrong reshape.
def _size(s):
    """A traced size as an int, or its sympy expression when symbolic."""
    if isinstance(s, torch.SymInt):
        expr = s.node.expr
        return int(expr) if expr.is_number else expr
    return int(s)


def _traced_sizes(node: fx.Node, arg: int = 0):
    """(input sizes, output sizes) from the traced metas, or None when either is missing or both are static."""
    x, out = node.args[arg].meta.get("val") if isinstance(node.args[arg], fx.Node) else None, node.meta.get("val")
    if not isinstance(x, torch.Tensor) or not isinstance(out, torch.Tensor):
        return None
    ins, outs = [_size(s) for s in x.shape], [_size(s) for s in out.shape]
    if all(isinstance(s, int) for s in ins + outs):
        return None
    return ins, outs


def _at_least_one(s) -> bool:
    """Whether the trace's shape environment bounds the size ``s`` (a SymInt or int) below by 1: a -1 cannot be
    inferred from an empty tensor."""
    if not isinstance(s, torch.SymInt):
        return int(s) >= 1
    try:
        return bool(s.node.shape_env.bound_sympy(s.node.expr).lower >= 1)
    except Exception:  # noqa: BLE001 - no bound known: it may be 0
        return False


def generic_reshape_target(ctx, node: fx.Node) -> Optional[list[int]]:
    """The Reshape target of a view-family ``node`` with 0 for copied and -1 for the one inferred symbolic dim,
    or None where the concrete target must be used (static sizes, a zero-size static dim, which needs
    allowzero, or more than one dim that neither a constant nor a copy expresses)."""
    sizes = _traced_sizes(node)
    if sizes is None:
        return None
    ins, outs = sizes
    if 0 in outs:
        return None
    target, inferred = [], []
    for i, s in enumerate(outs):
        if isinstance(s, int):
            target.append(s)
        elif i < len(ins) and not isinstance(ins[i], int) and ins[i] == s:
            target.append(0)
        else:
            target.append(-1)
            inferred.append(s)
    if len(inferred) > 1 or (inferred and not all(_at_least_one(s) for s in node.meta["val"].shape)):
        return None
    here_in, here_out = ctx.shape(node.args[0]), ctx.shape(node)
    if len(here_out) != len(target) or any(t == 0 and (i >= len(here_in) or here_in[i] != here_out[i])
                                           or t > 0 and t != here_out[i] for i, t in enumerate(target)):
        return None
    return target


def generic_expand_target(ctx, node: fx.Node) -> Optional[list[int]]:
    """The Expand target of ``node`` with 1 (broadcast keeps the input's dim) where the output dim is the same
    symbolic size as the input's (aligned from the right), or None where a symbolic dim is a new size (a
    broadcast of a size-1 dim to the batch, say), which no constant expresses."""
    sizes = _traced_sizes(node)
    if sizes is None:
        return None
    ins, outs = sizes
    offset = len(outs) - len(ins)
    target = []
    for i, s in enumerate(outs):
        if isinstance(s, int):
            target.append(s)
        elif i >= offset and ins[i - offset] == s:
            target.append(1)
        else:
            return None
    here_in, here_out = ctx.shape(node.args[0]), ctx.shape(node)
    if len(here_out) != len(target) or any(t == 1 and i >= offset and here_in[i - offset] != here_out[i]
                                           or t != 1 and t != here_out[i] for i, t in enumerate(target)):
        return None
    return target


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
