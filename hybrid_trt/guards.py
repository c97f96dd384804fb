"""A Dynamo guard filter for hybrid_trt graphs (torch.compile's documented ``guard_filter_fn`` option).

    torch.compile(model, backend="hybrid_trt", options={"guard_filter_fn": hybrid_trt.skip_guards_on_baked_weights})

Dynamo re-checks its guards at every call: for a CNN, thousands of checks over the module tree, which is the
largest per-call cost around a fully delegated model on the CPU (``benchmarks/results/overhead_cpu_2core.md``).
Among them is one TENSOR_MATCH guard (dtype, device, shape, strides, requires_grad) per parameter and buffer.
hybrid_trt bakes weights into its engines at compile time, like Inductor's freezing: a weight that went into an
engine, and that no other part of the compiled graph reads, is never looked at again after compilation. This
filter drops exactly those guards. Every other guard stays: the model input's, the module structure's (training
flag, hooks, submodules, attributes), global state, and those of weights that Inductor's part of the graph reads.

What changes: replacing such a weight's metadata (``model.half()``, ``model.to(...)``, a parameter of another
shape) no longer triggers a recompile, just as changing its values never did. The README's rule covers both:
after changing weights, call ``torch._dynamo.reset()`` and compile again.

The backend hands the set of baked weights to the filter through the compile that is running (Dynamo calls the
backend, then builds the guards of the same frame): it is attached to that compile's ``CompileContext``, so a
filter running for another frame, or after a compile whose graph hybrid_trt did not compile, drops nothing.
"""
from __future__ import annotations

from typing import Sequence

_ATTR = "_hybrid_trt_baked_inputs"


def record_baked_weights(tensors: Sequence) -> None:
    """Called by the backend: ``tensors`` (the parameter and buffer objects themselves) are weights baked into this
    compile's engines. Kept by identity for as long as the compile runs (Dynamo holds the tensors meanwhile)."""
    from torch._guards import CompileContext
    ctx = CompileContext.try_get()
    if ctx is None:
        return
    records = getattr(ctx, _ATTR, None)
    if records is None:
        records = []
        try:
            setattr(ctx, _ATTR, records)
        except AttributeError:  # a torch whose CompileContext takes no attributes: nothing is dropped
            return
    records.append((getattr(ctx, "attempt", None), frozenset(id(t) for t in tensors)))


def _baked_in_this_compile() -> frozenset:
    from torch._guards import CompileContext
    ctx = CompileContext.try_get()
    records = getattr(ctx, _ATTR, None) or []
    attempt = getattr(ctx, "attempt", None)
    mine = [ids for a, ids in records if a == attempt]
    # One hybrid graph per frame compile is what Dynamo produces; anything else keeps every guard.
    return mine[0] if len(mine) == 1 else frozenset()


def skip_guards_on_baked_weights(entries) -> list:
    """``guard_filter_fn`` for torch.compile: keep every guard except the TENSOR_MATCH guards of weights the
    compiled graph only uses inside engines (see the module doc)."""
    baked = _baked_in_this_compile()
    if not baked:
        return [True] * len(entries)
    return [not (e.guard_type == "TENSOR_MATCH" and e.has_value and id(e.value) in baked) for e in entries]
