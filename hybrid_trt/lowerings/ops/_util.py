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
