"""Strides across partition seams.

The ATen graph was traced with the strides each op produces (a transposed ``bmm`` result, a permuted view), and
some ops are legal only for those strides. Across a seam they no longer hold: a delegate returns contiguous
outputs and reads contiguous inputs, and Inductor picks its own layouts for the tensors it hands a delegate.
Two kinds of op depend on strides:

- ``view`` / ``_unsafe_view`` succeed only for compatible strides (``Cannot view a tensor with shape ... and
  strides ...``). They become ``reshape``, which is the same view wherever one exists and a copy elsewhere, so
  graphs whose strides did not change are traced exactly as before.
- ``as_strided`` reads storage directly, so a contiguous stand-in would silently change its result. A delegate
  output that reaches one (through views) is given its traced strides back with ``prims.copy_strided``.

The graph's own outputs are held to their traced strides too: a channels-last input gives channels-last outputs
in eager mode and under Inductor (which keeps output strides), and a caller may depend on that (a stride check,
``is_contiguous(memory_format=...)``, a ``view`` that needs them). A delegate output returned (directly or
through views) with non-contiguous traced strides gets the same ``copy_strided``; contiguous ones cost nothing.
"""
from __future__ import annotations

import torch
import torch.fx as fx

aten = torch.ops.aten

_VIEWS = (aten.view.default, aten._unsafe_view.default)
_STORAGE_READERS = (aten.as_strided.default, aten.as_strided_copy.default, aten.as_strided_scatter.default)


def views_to_reshapes(gm: fx.GraphModule) -> fx.GraphModule:
    """In place: every ``view`` of ``gm`` becomes a ``reshape`` (see the module doc)."""
    changed = False
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target in _VIEWS:
            node.target = aten.reshape.default
            changed = True
    if changed:
        gm.recompile()
    return gm


def keep_traced_strides(gm: fx.GraphModule, members, outputs) -> int:
    """In place, before stitching: each of ``outputs`` (nodes of the partition ``members`` that a delegate will
    produce contiguous) whose traced strides are not contiguous and which reaches a storage reader or the graph's
    output outside the partition gets a ``copy_strided`` back to those strides in front of its outside users.
    Returns how many."""
    members = set(members)
    inserted = 0
    for out in outputs:
        val = out.meta.get("val")
        outside = [u for u in out.users if u not in members]
        if not isinstance(val, torch.Tensor) or val.is_contiguous() or not _needs_traced_strides(outside):
            continue
        if not all(isinstance(s, int) for s in val.stride()):
            continue  # symbolic strides (dynamic shapes) cannot be a constant of the graph: left contiguous
        with gm.graph.inserting_after(out):
            restrided = gm.graph.call_function(torch.ops.prims.copy_strided.default, (out, list(val.stride())))
        restrided.meta["val"] = val
        for user in outside:
            user.replace_input_with(out, restrided)
        inserted += 1
    if inserted:
        gm.recompile()
    return inserted


def _needs_traced_strides(users) -> bool:
    """Whether ``users`` (or the aliases they return) include a storage reader or the graph's output."""
    stack, seen = list(users), set()
    while stack:
        user = stack.pop()
        if user.op == "output":
            return True
        if user in seen or user.op != "call_function":
            continue
        seen.add(user)
        if user.target in _STORAGE_READERS:
            return True
        if _returns_alias(user.target):
            stack.extend(user.users)
    return False


def _returns_alias(target) -> bool:
    schema = getattr(target, "_schema", None)
    return schema is not None and any(r.alias_info is not None and not r.alias_info.is_write
                                      for r in schema.returns)
