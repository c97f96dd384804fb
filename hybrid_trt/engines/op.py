"""``hybrid_trt::delegate``: the custom op every delegated partition becomes in the stitched graph.

It carries the partition's content key, not a process-local handle, so the stitched graph (and Inductor's code
compiled from it) means the same thing in every process: Inductor's FX-graph and AOTAutograd caches can hold it,
and a fresh process resolves the key from the engine store. Its fake implementation gives output shapes and
dtypes (symbolic ones included), so Inductor compiles the rest of the graph with the delegate calls inside it.
"""
from __future__ import annotations

import threading

import torch

from .runtime import REGISTRY

_LIB = torch.library.Library("hybrid_trt", "FRAGMENT")
_LIB.define("delegate(str key, Tensor[] inputs, SymInt[] sizes) -> Tensor[]")

_LIVE = REGISTRY.live


class _Caller(threading.local):
    armed = False  # inside run_surfacing_failures on this thread
    error = None


_AOT_CALLER = _Caller()


def _run(key, inputs, sizes):
    # Hot path: one dict lookup; the store is consulted only when the key is not live in this process.
    try:
        runtime = _LIVE.get(key)
        if runtime is None:
            runtime = REGISTRY.resolve(key)
        # AOTInductor's proxy executor (an exported package) passes an empty SymInt[] as None.
        return runtime.run(inputs, sizes if sizes is not None else ())
    except Exception as e:
        if _AOT_CALLER.armed:
            _AOT_CALLER.error = e
        raise


def run_surfacing_failures(fn, *args):
    """``fn(*args)`` (an AOTInductor model runner), raising any exception a delegate call raised inside it. The
    runner reaches this op through C++; torch 2.11's CUDA runner only logged such an exception ("Exception in
    aoti_torch: EngineNotInPackage ...", seen on the H200) and returned outputs that were never computed."""
    _AOT_CALLER.armed, _AOT_CALLER.error = True, None
    try:
        out = fn(*args)
    finally:
        error, _AOT_CALLER.armed, _AOT_CALLER.error = _AOT_CALLER.error, False, None
    if error is not None:
        raise error
    return out


def _fake(key, inputs, sizes):
    return REGISTRY.resolve(key).fake(inputs, sizes)


_LIB.impl("delegate", _run, "CompositeExplicitAutograd")
torch.library.register_fake("hybrid_trt::delegate", _fake, lib=_LIB)

delegate = torch.ops.hybrid_trt.delegate.default
