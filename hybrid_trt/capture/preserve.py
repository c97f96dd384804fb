"""Keep ops whole that ATen would decompose before any decomposition table is consulted.

``F.interpolate`` reaches AOTAutograd as ``upsample_*2d.vec``, whose CompositeImplicit kernel expands it into
index arithmetic during tracing; a delegate wants one Resize. This pass (on Dynamo's torch-level graph) routes
such calls through ``hybrid_trt::interpolate``, an opaque op with the same semantics, which the lowering
registry lowers to Resize and which is decomposed back for Inductor when Inductor runs it.
"""
from __future__ import annotations

from typing import Optional, Sequence

import torch
import torch.fx as fx
import torch.nn.functional as F

from .attention import attention_decomposition


@torch.library.custom_op("hybrid_trt::interpolate", mutates_args=())
def interpolate(x: torch.Tensor, size: Optional[Sequence[int]], scale_factor: Optional[Sequence[float]],
                mode: str, align_corners: Optional[bool]) -> torch.Tensor:
    return F.interpolate(x, size=size, scale_factor=scale_factor, mode=mode, align_corners=align_corners)


@interpolate.register_fake
def _(x, size, scale_factor, mode, align_corners):
    return F.interpolate(x, size=size, scale_factor=scale_factor, mode=mode, align_corners=align_corners)


def interpolate_decomposition(x, size, scale_factor, mode, align_corners):
    return F.interpolate(x, size=size, scale_factor=scale_factor, mode=mode, align_corners=align_corners)


INDUCTOR_DECOMPOSITIONS = {torch.ops.hybrid_trt.interpolate.default: interpolate_decomposition,
                           torch.ops.hybrid_trt.attention.default: attention_decomposition}


def inductor_decompositions() -> dict:
    """The table any graph of ours goes to Inductor with: Inductor's own, and our opaque ops decomposed back.
    Without the second part Inductor runs ``hybrid_trt::attention``/``interpolate`` as opaque calls into Python
    (no fusion around them): placement's Inductor side of EVA02-T took 21.5 against 20.1 ms decomposed (2-core
    CPU, one process), and the engine-bound fallback ran the same opaque calls."""
    from torch._inductor.decomposition import select_decomp_table
    return {**select_decomp_table(), **INDUCTOR_DECOMPOSITIONS}

_MODES = ("nearest", "bilinear")


def preserve_ops(gm: fx.GraphModule) -> fx.GraphModule:
    changed = False
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target is F.interpolate:
            changed |= _route_interpolate(node)
    if changed:
        gm.recompile()
    return gm


def _route_interpolate(node: fx.Node) -> bool:
    names = ("input", "size", "scale_factor", "mode", "align_corners", "recompute_scale_factor", "antialias")
    args = dict(zip(names, node.args))
    args.update(node.kwargs)
    x = args.get("input")
    example = x.meta.get("example_value") if isinstance(x, fx.Node) else None
    mode = args.get("mode", "nearest")
    if (example is None or example.dim() != 4 or mode not in _MODES or args.get("recompute_scale_factor")
            or args.get("antialias")):
        return False
    size, scale = args.get("size"), args.get("scale_factor")
    if isinstance(size, (fx.Node,)) or isinstance(scale, fx.Node):
        return False
    size = None if size is None else list(size) if isinstance(size, (list, tuple)) else [size, size]
    scale = None if scale is None else [float(s) for s in scale] if isinstance(scale, (list, tuple)) \
        else [float(scale)] * 2
    node.target = torch.ops.hybrid_trt.interpolate.default
    node.args = (x, size, scale, mode, args.get("align_corners"))
    node.kwargs = {}
    return True
