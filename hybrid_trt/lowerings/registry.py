"""Registry of ATen -> ONNX lowerings: one small function per op (or op family), each with its capability check.

A delegate's capability is read from here: a node is lowerable iff a lowering is registered for its target, its
tensor dtypes are in the lowering's dtype set, and the lowering's own ``check`` (attributes, ranks, ...) accepts it.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Iterable, Optional

import torch
import torch.fx as fx

FLOAT = frozenset({torch.float32, torch.float16, torch.bfloat16, torch.float64})
INT = frozenset({torch.int64, torch.int32, torch.int8, torch.uint8, torch.int16})
BOOL = frozenset({torch.bool})
NUMERIC = FLOAT | INT
SIGNED = NUMERIC - {torch.uint8}  # ONNX ops without unsigned types (Neg)
ANY = NUMERIC | BOOL

# ONNX-consuming delegates share the standard ONNX domain; custom-domain ops (plugins) name the delegates that
# can run them.
STANDARD_DOMAIN = ""

Check = Callable[[fx.Node], Optional[str]]


@dataclasses.dataclass(frozen=True)
class Lowering:
    target: object
    fn: Callable
    dtypes: frozenset
    check: Optional[Check]
    domain: str
    name: str

    def unsupported_reason(self, node: fx.Node) -> Optional[str]:
        """None when this lowering can take ``node``; otherwise why not (shown in the report)."""
        for dtype in _tensor_dtypes(node):
            if dtype not in self.dtypes:
                return f"dtype {str(dtype).replace('torch.', '')} not supported by lowering {self.name}"
        if self.check is not None:
            return self.check(node)
        return None


_LOWERINGS: dict[object, Lowering] = {}


def lowering(*targets, dtypes: Iterable[torch.dtype] = FLOAT, check: Optional[Check] = None,
             domain: str = STANDARD_DOMAIN):
    """Register ``fn(ctx, node) -> output value name(s)`` as the lowering of each ATen overload in ``targets``.

    A target may also be an op's name, ``"torchvision.deform_conv2d.default"`` (``str`` of its overload), for an
    op of a library hybrid_trt does not import: its ops exist only once the user's model imported it, and
    importing it here would cost every process its import time."""
    dtypes = frozenset(dtypes)

    def register(fn):
        for target in targets:
            if target in _LOWERINGS:
                raise ValueError(f"a lowering for {target} is already registered ({_LOWERINGS[target].name})")
            _LOWERINGS[target] = Lowering(target, fn, dtypes, check, domain, fn.__name__)
        return fn

    return register


def lowering_for(target) -> Optional[Lowering]:
    found = _LOWERINGS.get(target)
    if found is None and isinstance(target, torch._ops.OpOverload):
        found = _LOWERINGS.get(str(target))  # registered by name (an optional library's op)
    return found


def registered_targets() -> frozenset:
    return frozenset(_LOWERINGS)


def _tensor_dtypes(node: fx.Node):
    for inp in node.all_input_nodes:
        val = inp.meta.get("val")
        if isinstance(val, torch.Tensor):
            yield val.dtype
    val = node.meta.get("val")
    # Of a multi-output op only the primary output is checked: the others are indices or statistics whose
    # dtype the op fixes (e.g. int64 pooling indices), not data the delegate has to represent.
    if isinstance(val, (list, tuple)):
        val = val[0] if val else None
    if isinstance(val, torch.Tensor):
        yield val.dtype
