"""``hybrid_trt::delegate``: the custom op every delegated partition becomes in the stitched graph.

It carries the partition's content key, not a process-local handle, so the stitched graph (and Inductor's code
compiled from it) means the same thing in every process: Inductor's FX-graph and AOTAutograd caches can hold it,
and a fresh process resolves the key from the engine store. Its fake implementation gives output shapes and
dtypes (symbolic ones included), so Inductor compiles the rest of the graph with the delegate calls inside it.
"""
from __future__ import annotations

import torch

from .runtime import REGISTRY

_LIB = torch.library.Library("hybrid_trt", "FRAGMENT")
_LIB.define("delegate(str key, Tensor[] inputs, SymInt[] sizes) -> Tensor[]")

_LIVE = REGISTRY.live


def _run(key, inputs, sizes):
    # Hot path: one dict lookup; the store is consulted only when the key is not live in this process.
    runtime = _LIVE.get(key)
    if runtime is None:
        runtime = REGISTRY.resolve(key)
    # AOTInductor's proxy executor (an exported package) passes an empty SymInt[] as None.
    return runtime.run(inputs, sizes if sizes is not None else ())


def _fake(key, inputs, sizes):
    return REGISTRY.resolve(key).fake(inputs, sizes)


_LIB.impl("delegate", _run, "CompositeExplicitAutograd")
torch.library.register_fake("hybrid_trt::delegate", _fake, lib=_LIB)

delegate = torch.ops.hybrid_trt.delegate.default
