"""Shape-generic sizes beyond Reshape/Expand targets (those are in _util): slice bounds, Resize scales or sizes,
and the shape of a factory's output, written so the lowered graph is the same at every size of a dynamic range.

Lowering runs at concrete shapes (to_onnx.specialise), while each fx node's ``meta["val"]`` holds the traced
symbolic sizes. Where a size is a traced expression, the lowering can say what it means instead of what it is at
this point: "to the end" (INT64_MAX), "k before the end" (a negative bound), "k times the input's size" (a Resize
scale), or "the size of that tensor's dim i" (ONNX ``Shape`` of a tensor the partition already has, the last
resort because it puts shape arithmetic into the engine). Equal expressions are equal sizes under the trace's
guards, so each form is exact at every point of the range; each is also checked against this point's concrete
sizes, so a stale meta can only cost the generic form. Static traces get None everywhere here and lower exactly
as before (same graph, same engine key). ``engines/ranges.py`` still compares the lowerings at several points, so
anything that remains shape-specific keeps engines per shape instead of being wrong.
"""
from __future__ import annotations

from typing import Optional, Sequence

import sympy
import torch
import torch.fx as fx

from ._util import _size

INT64_MAX = 2**63 - 1


def traced(x):
    """A traced size argument (fx node of a SymInt, or an int) as an int or sympy expression; None otherwise."""
    if isinstance(x, fx.Node):
        v = x.meta.get("val")
        return _size(v) if isinstance(v, (torch.SymInt, int)) and not isinstance(v, bool) else None
    if isinstance(x, (int, torch.SymInt)) and not isinstance(x, bool):
        return _size(x)
    return None


def traced_shape(x) -> Optional[list]:
    """The traced sizes of a tensor fx node (ints and sympy expressions), or None."""
    v = x.meta.get("val") if isinstance(x, fx.Node) else None
    return [_size(s) for s in v.shape] if isinstance(v, torch.Tensor) else None


def is_symbolic(sizes: Optional[Sequence]) -> bool:
    return sizes is not None and any(not isinstance(s, int) for s in sizes)


def _at_least(arg: fx.Node, lo: int) -> bool:
    """Whether the trace's shape environment bounds the size node ``arg`` below by ``lo``."""
    v = arg.meta.get("val")
    if not isinstance(v, torch.SymInt):
        return isinstance(v, int) and v >= lo
    try:
        return bool(v.node.shape_env.bound_sympy(v.node.expr).lower >= lo)
    except Exception:  # noqa: BLE001 - no bound known
        return False


def slice_bound(ctx, x: fx.Node, dim: int, bound) -> Optional[int]:
    """A Slice start/end that is the traced expression ``d + k`` of the sliced dim ``d`` (symbolic), as a
    constant: INT64_MAX for k >= 0 (to the end; ATen and ONNX both clamp to the size), else k (ONNX counts it
    from the end). Only where the trace bounds the expression below by 0 at every size of the range: ATen reads
    a negative value from the end too, so ``d - 5`` at d = 3 is 1 in ATen and 0 in ONNX. None otherwise."""
    e, shape = traced(bound), traced_shape(x)
    if e is None or isinstance(e, int) or shape is None or isinstance(shape[dim], int):
        return None
    k = sympy.expand(e - shape[dim])
    if not k.is_Integer:
        return None
    k = int(k)
    if k < 0 and not _at_least(bound, 0):
        return None
    here, size = int(ctx.arg(bound)), ctx.shape(x)[dim]
    if here != size + k and not (k >= 0 and here >= size):
        return None
    return INT64_MAX if k >= 0 else k


def integer_scales(ctx, node: fx.Node, arg: int = 0) -> Optional[list[int]]:
    """Per dim, the positive integer k with output size = k * input size in the traced expressions (1 where
    equal), for a node whose sizes are symbolic; None where some dim is no exact integer multiple. With these
    as Resize ``scales`` the output size is exact (floor(in * k) = k * in), and ONNX Runtime and TensorRT map
    coordinates with out/in = k, the same number they derive from explicit sizes."""
    ins, outs = traced_shape(node.args[arg]), traced_shape(node)
    if ins is None or outs is None or len(ins) != len(outs) or not is_symbolic(ins + outs):
        return None
    scales = []
    for i, o in zip(ins, outs):
        if i == 0:
            return None
        k = sympy.simplify(sympy.sympify(o) / i)
        if not (k.is_Integer and k >= 1):
            return None
        scales.append(int(k))
    here_in, here_out = ctx.shape(node.args[arg]), ctx.shape(node)
    if any(o != k * i for i, o, k in zip(here_in, here_out, scales)):
        return None
    return scales


def dim_of(ctx, expr, concrete: int) -> Optional[str]:
    """A 1-D, one-element int64 value holding the size ``expr``: ONNX ``Shape`` of the first tensor the
    partition has already lowered (inputs first) with a dim traced as that same expression; None if none has."""
    for fx_node, name in ctx.onnx_names.items():
        if not isinstance(name, str) or not isinstance(ctx.values.get(fx_node), torch.Tensor):
            continue
        shape = traced_shape(fx_node)
        if shape is None:
            continue
        here = ctx.shape(fx_node)
        for i, s in enumerate(shape):
            if not isinstance(s, int) and s == expr and here[i] == concrete:
                return ctx.op("Shape", name, start=i, end=i + 1)
    return None


def shape_value(ctx, node: fx.Node) -> Optional[str]:
    """The output shape of ``node`` as a 1-D int64 value built from constants and ``dim_of`` sizes, for a node
    whose traced output sizes are symbolic; None where it is static or some size has no tensor to read it from."""
    sizes = traced_shape(node)
    if not is_symbolic(sizes):
        return None
    here = ctx.shape(node)
    parts: list = []
    for s, concrete in zip(sizes, here):
        if isinstance(s, int):
            if s != concrete:
                return None
            if parts and isinstance(parts[-1], list):
                parts[-1].append(s)
            else:
                parts.append([s])
            continue
        source = dim_of(ctx, s, concrete)
        if source is None:
            return None
        parts.append(source)
    names = [ctx.ints(p) if isinstance(p, list) else p for p in parts]
    return names[0] if len(names) == 1 else ctx.op("Concat", *names, axis=0)
