"""Per-node capability: can delegate D run node N? Answered from the lowering registry, never a hand-kept list."""
from __future__ import annotations

import enum
import operator
from typing import Optional

import torch
import torch.fx as fx

from ..delegates.registry import dtype_declined
from ..lowerings import registry

SIZE_TYPES = (torch.SymInt, torch.SymFloat, torch.SymBool, int, float, bool)


class NodeKind(enum.Enum):
    STRUCTURAL = "structural"  # placeholder, get_attr, output
    SIZE = "size"  # size arithmetic (SymInt values); runs wherever its users need it
    TUPLE_ITEM = "tuple_item"  # operator.getitem on a multi-output op: goes where its source goes
    OP = "op"  # a tensor operation that some executor must run


def classify(node: fx.Node) -> NodeKind:
    if node.op in ("placeholder", "get_attr", "output"):
        return NodeKind.STRUCTURAL
    if node.target is operator.getitem and isinstance(node.args[0], fx.Node) and \
            isinstance(node.args[0].meta.get("val"), (tuple, list)):
        return NodeKind.TUPLE_ITEM
    val = node.meta.get("val")
    if isinstance(val, SIZE_TYPES):
        return NodeKind.SIZE
    return NodeKind.OP


def op_name(node: fx.Node) -> str:
    target = node.target
    name = getattr(target, "__name__", None) or str(target)
    if isinstance(target, torch._ops.OpOverload):
        name = f"{target.namespace}.{target._schema.name.split('::')[-1]}.{target._overloadname}"
    return name


def unsupported_reason(node: fx.Node, delegate, forced_to_inductor: frozenset) -> Optional[str]:
    """None if ``delegate`` can take ``node``; otherwise the reason shown in the report."""
    if _matches_forced(node, forced_to_inductor):
        return "forced to Inductor by option force_inductor_ops"
    val = node.meta.get("val")
    if _has_unbacked_size(node):
        # Sizes that depend on data (e.g. active voxels) change every call: an engine per shape would be rebuilt
        # every frame, so such ops stay with Inductor, which handles them symbolically.
        return "data-dependent (unbacked) size"
    if any(isinstance(i.meta.get("val"), torch.SymFloat) for i in node.all_input_nodes):
        # A float computed from symbolic sizes (interpolate's scale at dynamic shapes): an engine takes sizes as
        # integers, so the op stays with Inductor instead of failing its partition's build.
        return "reads a float computed from symbolic sizes"
    for v in (val if isinstance(val, (tuple, list)) else (val,)):
        if isinstance(v, torch.Tensor) and v.device.type not in delegate.device_types:
            return f"{delegate.name}: device {v.device.type} not supported"
    mixed = _mixed_device_input(node)
    if mixed is not None:
        return mixed
    lowering = registry.lowering_for(node.target)
    if lowering is None:
        return f"no lowering for {op_name(node)}"
    if lowering.domain not in delegate.domains:
        return f"{delegate.name}: ONNX domain {lowering.domain!r} not supported"
    reason = lowering.unsupported_reason(node)
    if reason is not None:
        return reason
    for dtype in registry._tensor_dtypes(node):
        if dtype not in delegate.dtypes:
            return dtype_declined(delegate.name, dtype)
    return delegate.node_unsupported_reason(node)


def declined_for_dtype_or_device(reason: str) -> bool:
    """Whether ``reason`` (from ``unsupported_reason``) declines a node for its dtype or device: a setting of the
    model (bfloat16, a device the delegate lacks), not a lowering missing from hybrid_trt."""
    # "<delegate>: dtype D not supported[ <where>]" (delegates.registry.dtype_declined), "<delegate>: device X
    # not supported"
    return ((reason.endswith(" not supported") or " not supported on " in reason)
            and (": dtype " in reason or ": device " in reason))


def node_device(node: fx.Node) -> Optional[torch.device]:
    """The device of the first tensor ``node`` produces (None: it produces no tensor)."""
    val = node.meta.get("val")
    for v in (val if isinstance(val, (tuple, list)) else (val,)):
        if isinstance(v, torch.Tensor):
            return v.device
    return None


def _mixed_device_input(node: fx.Node) -> Optional[str]:
    """ATen lets a CUDA op read a CPU scalar tensor (torchvision's detectors do, for image sizes and scales). An
    engine binds all its inputs on its own device, so such a pointer would be read as device memory (an illegal
    memory access on the H200): the op stays with Inductor, which handles the mix."""
    device = node_device(node)
    if device is None:
        return None
    for inp in node.all_input_nodes:
        v = inp.meta.get("val")
        if isinstance(v, torch.Tensor) and v.device != device:
            return f"mixes devices (an input on {v.device}, output on {device})"
    return None


def _matches_forced(node: fx.Node, forced: frozenset) -> bool:
    if not forced:
        return False
    name = op_name(node)  # e.g. aten.convolution.default
    packet = name.rsplit(".", 1)[0]  # aten.convolution
    if name in forced or packet in forced or packet.split(".", 1)[-1] in forced:
        return True
    return any(known in forced or known.split(".", 1)[-1] in forced for known in _known_as(node, packet))


# Ops hybrid_trt keeps whole under names of its own (capture/attention.py, capture/preserve.py), by the ATen names
# a user knows them by: forcing ``aten.scaled_dot_product_attention`` or ``aten.upsample_bilinear2d`` keeps ours with
# Inductor. Interpolation by its mode and rank, as F.interpolate picks the ATen op.
KEPT_WHOLE_AS = {"hybrid_trt.attention": ("aten.scaled_dot_product_attention",),
                 "hybrid_trt.interpolate": ("aten.upsample_nearest1d", "aten.upsample_nearest2d",
                                            "aten.upsample_nearest3d", "aten._upsample_nearest_exact1d",
                                            "aten._upsample_nearest_exact2d", "aten._upsample_nearest_exact3d",
                                            "aten.upsample_linear1d", "aten.upsample_bilinear2d",
                                            "aten.upsample_trilinear3d", "aten.upsample_bicubic2d",
                                            "aten.adaptive_avg_pool1d", "aten.adaptive_avg_pool2d",
                                            "aten.adaptive_avg_pool3d")}
_INTERPOLATE_OPS = {"nearest": "upsample_nearest{d}d", "nearest-exact": "_upsample_nearest_exact{d}d",
                    "linear": "upsample_linear1d", "bilinear": "upsample_bilinear2d", "trilinear": "upsample_trilinear3d",
                    "bicubic": "upsample_bicubic2d", "area": "adaptive_avg_pool{d}d"}


def _known_as(node: fx.Node, packet: str) -> tuple:
    if packet == "hybrid_trt.interpolate":
        x, mode = node.args[0], node.args[3] if len(node.args) > 3 else node.kwargs.get("mode", "nearest")
        rank = x.meta["val"].dim() if isinstance(x, fx.Node) and "val" in x.meta else 4
        pattern = _INTERPOLATE_OPS.get(mode)
        return (f"aten.{pattern.format(d=rank - 2)}",) if pattern else ()
    return KEPT_WHOLE_AS.get(packet, ())


def _has_unbacked_size(node: fx.Node) -> bool:
    from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols
    vals = [node.meta.get("val")] + [i.meta.get("val") for i in node.all_input_nodes]
    return any(v is not None and free_unbacked_symbols(v) for v in vals)
