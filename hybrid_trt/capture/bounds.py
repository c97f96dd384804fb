"""Declared finite ranges of a graph's dynamic dimensions, which let a symbolic partition get one engine for the
whole range (engines/ranges.py) instead of one per size.

torch.export declares them (``dynamic_shapes``' Dims: export/api.py). Under ``torch.compile`` a dimension Dynamo
made dynamic on its own is unbounded, so its partitions keep engines per shape; one the user marked with bounds
(``torch._dynamo.mark_dynamic(points, 0, min=..., max=...)``, a LiDAR frame's point count) has them in Dynamo's
shape environment, and is read here.
"""
from __future__ import annotations

import torch
import torch.fx as fx


def finite(bound) -> bool:
    """Whether a range bound is a number: torch writes an unbounded dimension's max as its own int_oo, whose
    sympy ``is_finite`` says True."""
    from torch.utils._sympy.numbers import int_oo
    return bound not in (int_oo, -int_oo) and bool(bound.is_finite)


def declared_ranges(gm: fx.GraphModule) -> tuple:
    """``((symbol, min, opt, max), ...)`` of every input dimension of Dynamo's graph that is a symbol with a finite
    range in its shape environment. opt (the shape TensorRT tunes for) is the upper bound, not the size this
    compile happened to trace: a LiDAR frame's point count differs at every start, and with it the graph key and
    the range engine's key would differ, so a warm start would build again. The traced (fake) inputs are the
    placeholders' ``example_value``; the example inputs a backend is given are real."""
    out = {}
    for node in gm.graph.nodes:
        t = node.meta.get("example_value") if node.op == "placeholder" else None
        if not isinstance(t, torch.Tensor):
            continue
        for size in t.shape:
            if not isinstance(size, torch.SymInt) or not size.node.expr.is_Symbol:
                continue
            expr, shape_env = size.node.expr, size.node.shape_env
            r = shape_env.var_to_range.get(expr)
            if str(expr) in out or r is None or not (finite(r.lower) and finite(r.upper)):
                continue
            lo, hi = int(r.lower), int(r.upper)
            out[str(expr)] = (str(expr), lo, hi, hi)
    return tuple(out[name] for name in sorted(out))
