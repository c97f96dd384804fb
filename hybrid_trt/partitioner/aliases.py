"""Which nodes alias which, and which layouts a fresh buffer can hold: what both the partitioner (which views must
stay with Inductor) and the stitcher (which delegate outputs get their traced strides back, stitch/layout.py) ask
of a traced graph."""
from __future__ import annotations

import operator

import torch

aten = torch.ops.aten

STORAGE_READERS = (aten.as_strided.default, aten.as_strided_copy.default, aten.as_strided_scatter.default)


def reads_storage(users, source=None) -> bool:
    """Whether ``users`` of ``source`` (or the aliases they return) include a storage reader (``as_strided``)."""
    return reaches(users, returned=False, source=source)


def restridable(val: torch.Tensor) -> bool:
    """Whether a fresh buffer can hold ``val``'s layout exactly, storage included: non-overlapping and dense, at
    offset 0 (undecided with symbolic sizes: no)."""
    from torch.fx.experimental.symbolic_shapes import statically_known_true

    try:  # statically: a test of a backed size would add a guard to the graph
        return dense(val) and statically_known_true(val.storage_offset() == 0)
    except Exception:  # noqa: BLE001 - an offset the trace cannot decide
        return False


def reaches(users, returned: bool, source=None) -> bool:
    """Whether ``users`` of ``source`` (or the aliases they return) include the graph's output (``returned``) or
    a storage reader of it (not ``returned``; ``as_strided_scatter`` reads the storage of its ``self`` only,
    ``source`` None: of whichever input). The items of a view list (``split``, ``unbind``) are aliases too."""
    stack, seen = [(source, u) for u in users], set()
    while stack:
        via, user = stack.pop()
        if user.op == "output":
            if returned:
                return True
            continue
        if user in seen or user.op != "call_function":
            continue
        seen.add(user)
        if user.target in STORAGE_READERS and not returned:
            if user.target is not aten.as_strided_scatter.default or via is None or user.args[0] is via:
                return True
            continue
        if user.target is operator.getitem or returns_alias(user.target):
            stack.extend((user, u) for u in user.users)
    return False


def dense(val: torch.Tensor) -> bool:
    import torch._prims_common as prims_common

    # "_or_false": False where a symbolic size leaves it undecided (older torch: the exact test).
    check = getattr(prims_common, "is_non_overlapping_and_dense_or_false", None) or getattr(
        prims_common, "is_non_overlapping_and_dense")
    try:
        return bool(check(val))
    except Exception:  # noqa: BLE001 - a size the trace cannot decide: leave the output contiguous
        return False


def returns_alias(target) -> bool:
    schema = getattr(target, "_schema", None)
    return schema is not None and any(r.alias_info is not None and not r.alias_info.is_write
                                      for r in schema.returns)
