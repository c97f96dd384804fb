"""Sorted search: bucketize and searchsorted, the binning of depth (LSS-style lift), range and angle bins.

ONNX has no binary search. The position ATen's binary search finds in a sorted sequence is the number of entries
it steps past, so it is written as a count: ``left`` (lower bound) counts entries with ``not (entry >= x)``,
``right`` (upper bound) entries with ``not (entry > x)``. These are ATen's own comparisons, so a NaN input lands
past every entry as in eager, and ties fall where they fall there. The comparison tensor is (input elements x
sequence length): fine for bin edges, which is what these ops take in perception code. ATen leaves an unsorted
sequence undefined; so does this.
"""
from __future__ import annotations

import torch

from ..registry import FLOAT, lowering

aten = torch.ops.aten

# ONNX Greater/GreaterOrEqual take every numeric type, ONNX Runtime's kernels the wide ones.
_DTYPES = FLOAT | {torch.int32, torch.int64}


def _count_passed(ctx, node, sequence: str, sequence_dtype, x, right: bool, batched: bool) -> str:
    """How many entries of ``sequence`` (an ONNX value; its last dim) the search passes for each element of
    ``x``, compared in the two dtypes' promoted type as ATen compares them."""
    dtype = torch.promote_types(sequence_dtype, ctx.dtype(x))
    seq = sequence if dtype == sequence_dtype else ctx.cast(sequence, dtype)
    values = ctx.op("Unsqueeze", ctx.input(x, dtype), ctx.ints([-1]))
    if batched:  # (..., N) against (..., M): one row of the sequence per row of the input
        seq = ctx.op("Unsqueeze", seq, ctx.ints([-2]))
    stops = ctx.op("Greater" if right else "GreaterOrEqual", seq, values)
    passed = ctx.cast(ctx.op("Not", stops), torch.int32)  # int32: the count fits, and TensorRT 8 has no int64 tensors
    return ctx.cast(ctx.op("ReduceSum", passed, ctx.ints([-1]), keepdims=0), ctx.dtype(node))


def _check_bucketize(node):
    boundaries = node.args[1].meta.get("val")
    return None if boundaries.dim() == 1 else f"{boundaries.dim()}-d boundaries (ATen takes 1-d)"


@lowering(aten.bucketize.Tensor, dtypes=_DTYPES, check=_check_bucketize)
def lower_bucketize(ctx, node):
    x, boundaries = node.args[:2]
    return _count_passed(ctx, node, ctx.input(boundaries), ctx.dtype(boundaries), x, node.kwargs.get("right", False),
                         batched=False)


def _right(node) -> bool:
    side = node.kwargs.get("side")
    return side == "right" if side is not None else node.kwargs.get("right", False)


@lowering(aten.searchsorted.Tensor, dtypes=_DTYPES)
def lower_searchsorted(ctx, node):
    sequence, x, sorter = node.args[0], node.args[1], node.kwargs.get("sorter")
    seq = ctx.input(sequence)
    if sorter is not None:  # the permutation that sorts the sequence: positions are in that sorted order
        seq = ctx.op("GatherElements", seq, ctx.input(sorter, torch.int64), axis=-1)
    return _count_passed(ctx, node, seq, ctx.dtype(sequence), x, _right(node), batched=ctx.val(sequence).dim() > 1)
