"""Shapes of a partition's inputs at compile time, without adding guards: size hints of symbolic sizes, input specs
for the engine key, the input-shape signature that names an engine per shape, and output metas as a store entry
keeps them."""
from __future__ import annotations

import warnings

import torch
import torch.fx as fx


class UnhintedSize(ValueError):
    """A data-dependent size with no example value: the partition cannot be lowered at a concrete shape."""


def hint(size) -> int:
    """An int size as it is; a symbolic one's example value (the value Dynamo traced), without adding a guard."""
    if isinstance(size, int):
        return size
    try:  # torch 2.14's names
        from torch.fx.experimental.symbolic_shapes import guarding_hint_or_throw as hint_int
        from torch.fx.experimental.symbolic_shapes import has_guarding_hint as has_hint
    except ImportError:
        from torch.fx.experimental.symbolic_shapes import has_hint, hint_int
    if not has_hint(size):
        raise UnhintedSize(f"size {size} has no example value (data-dependent): cannot lower")
    with warnings.catch_warnings():
        # torch 2.11's hint_int warns of its own rename (FutureWarning "used size_hint instead of hint_int") at
        # every symbolic partition's compile: torch's API transition, nothing the user can act on.
        warnings.simplefilter("ignore", FutureWarning)
        return hint_int(size)


def hint_shapes(input_metas, n_sizes: int, module: fx.GraphModule):
    """The partition's input shapes and size arguments at their traced example values (no guard added)."""
    shapes = [tuple(hint(s) for s in m.shape) for m in input_metas]
    placeholders = [n for n in module.graph.nodes if n.op == "placeholder"]
    sizes = tuple(hint(n.meta["val"]) for n in placeholders[len(input_metas):len(input_metas) + n_sizes])
    return shapes, sizes


def size_expr(size):
    """An int, or the sympy expression of a symbolic size (no guard: ``int(SymInt)`` would add one)."""
    return size if isinstance(size, int) else size.node.expr


def input_spec(meta: torch.Tensor) -> tuple:
    """An input spec without forcing symbolic sizes to ints (``int(SymInt)`` would add a guard)."""
    def text(s):
        return s if isinstance(s, int) else str(s)
    return ([text(s) for s in meta.shape], meta.dtype, [text(s) for s in meta.stride()], meta.device)


def signature_text(shapes, sizes) -> str:
    """An input-shape signature, as engines per shape are keyed and named (and a package's engine check reads)."""
    text = ", ".join("x".join(map(str, s)) for s in shapes)
    return text + (f" sizes={list(sizes)}" if sizes else "")


def metas_json(metas) -> list:
    return [[[int(s) for s in m.shape], str(m.dtype).replace("torch.", "")] for m in metas]


def metas_from_json(data) -> list:
    return [torch.empty(shape, dtype=getattr(torch, dtype), device="meta") for shape, dtype in data]
