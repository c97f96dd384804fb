"""Strides across partition seams.

The ATen graph was traced with the strides each op produces (a transposed ``bmm`` result, a permuted view), and
some ops are legal only for those strides. Across a seam they no longer hold: a delegate returns contiguous
outputs and reads contiguous inputs, and Inductor picks its own layouts for the tensors it hands a delegate.
Two kinds of op depend on strides:

- ``view`` / ``_unsafe_view`` succeed only for compatible strides (``Cannot view a tensor with shape ... and
  strides ...``). They become ``reshape``, which is the same view wherever one exists and a copy elsewhere, so
  graphs whose strides did not change are traced exactly as before.
- ``as_strided`` reads storage directly, so a contiguous stand-in would silently change its result. A delegate
  output that reaches one (through views) is given its traced strides back with ``prims.copy_strided``. That
  works only for strides a fresh buffer can have (:func:`restridable`): a view with others (an expand's stride 0,
  which ``copy_strided`` cannot write; a slice's gaps or offset, which hold its base's elements) is kept out of
  the delegate by the partitioner, so Inductor makes it a view of the delegate's output, as eager does.

The graph's own outputs are held to their traced strides too: a channels-last input gives channels-last outputs
in eager mode and under Inductor (which keeps output strides), and a caller may depend on that (a stride check,
``is_contiguous(memory_format=...)``, a ``view`` that needs them). A delegate output returned (directly or
through views) with non-contiguous, non-overlapping and dense traced strides gets the same ``copy_strided`` (a
``clone`` to its memory format when the strides are symbolic); contiguous ones cost nothing. A returned slice
with gaps or expand, whose strides need storage the delegate's output lacks, is left to Inductor by the partitioner
(static strides), which makes it a view of the delegate's output; with symbolic strides it stays contiguous.
"""
from __future__ import annotations

import torch
import torch.fx as fx

from ..partitioner.aliases import dense as _dense, reaches as _reaches

aten = torch.ops.aten

_VIEWS = (aten.view.default, aten._unsafe_view.default)


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
    produce contiguous) whose traced strides are not contiguous gets them back in front of its outside users when
    it reaches a storage reader (``copy_strided``, static strides) or the graph's output (non-overlapping, dense
    strides: ``copy_strided`` when static, a ``clone`` to the memory format when symbolic). Returns how many."""
    members = set(members)
    inserted = 0
    for out in outputs:
        val = out.meta.get("val")
        outside = [u for u in out.users if u not in members]
        if not isinstance(val, torch.Tensor) or _contiguous(val):
            continue
        reader = _reaches(outside, returned=False, source=out)
        if not reader and not (_reaches(outside, returned=True) and _dense(val)):
            continue  # a returned gapped slice or expand with symbolic strides: its strides need storage it lacks
        static = all(isinstance(s, int) for s in val.stride())
        if static:
            target, args, kwargs = torch.ops.prims.copy_strided.default, (out, list(val.stride())), {}
        else:  # symbolic strides cannot be constants of the graph; a memory format can
            fmt = None if reader else _memory_format(val)
            if fmt is None:
                continue
            target, args, kwargs = aten.clone.default, (out,), {"memory_format": fmt}
        with gm.graph.inserting_after(out):
            restrided = gm.graph.call_function(target, args, kwargs)
        restrided.meta["val"] = val
        for user in outside:
            user.replace_input_with(out, restrided)
        inserted += 1
    if inserted:
        gm.recompile()
    return inserted


def _contiguous(val: torch.Tensor) -> bool:
    try:
        return bool(val.is_contiguous())
    except Exception:  # noqa: BLE001 - an unbacked size the trace cannot decide: nothing to give back
        return True


def _memory_format(val: torch.Tensor):
    """channels_last / channels_last_3d where ``val`` is laid out so, else None."""
    import torch._prims_common as prims_common

    try:
        fmt = prims_common.suggest_memory_format(val)
    except Exception:  # noqa: BLE001 - a size the trace cannot decide
        return None
    return fmt if fmt in (torch.channels_last, torch.channels_last_3d) else None
