"""``hybrid_trt::delegate``: the custom op every delegated partition becomes in the stitched graph.

Its fake implementation gives output shapes and dtypes (symbolic ones included), so Inductor compiles the rest
of the graph with the delegate calls inside it, as one graph.
"""
from __future__ import annotations

import itertools
import weakref

import torch

_LIB = torch.library.Library("hybrid_trt", "FRAGMENT")
_LIB.define("delegate(int handle, Tensor[] inputs, SymInt[] sizes) -> Tensor[]")

# Registry of live partition runtimes by handle; the compiled graph holds the strong references.
_RUNTIMES: "weakref.WeakValueDictionary[int, object]" = weakref.WeakValueDictionary()
_NEXT = itertools.count()


def register_runtime(runtime) -> int:
    handle = next(_NEXT)
    _RUNTIMES[handle] = runtime
    return handle


def _run(handle, inputs, sizes):
    return _RUNTIMES[handle].run(inputs, sizes)


def _fake(handle, inputs, sizes):
    return _RUNTIMES[handle].fake(inputs, sizes)


_LIB.impl("delegate", _run, "CompositeExplicitAutograd")
torch.library.register_fake("hybrid_trt::delegate", _fake, lib=_LIB)

delegate = torch.ops.hybrid_trt.delegate.default
