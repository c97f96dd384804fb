"""The whole compiled callable in one CUDA graph of hybrid_trt's own: ``cuda_graph_runner="whole"``.

Inductor's CUDA-graph trees (the default runner, cudagraphs.py) capture around anything uncapturable and manage
outputs across graphs, and they pay for it at every call: on an H100 at fp16 batch 1 a call of Inductor's
``reduce-overhead`` cost 0.18-0.36 ms more than a bare replay of the same kernels (input copy, replay), more than
the kernels ONNX Runtime's own graph of the whole model lost to Inductor's on two of three models
(``benchmarks/results/cudagraphs_h100.md``, session 25). This runner is the bare replay behind Dynamo's frame.
Per input signature it runs the callable once uncaptured (lazy set-up: Inductor's first call, each engine's first
run), captures it at the next call, and from then on a call is: one check that the weights the graph reads are
the tensors captured, one batched copy of the other inputs into the graph's input buffers, one replay on the
caller's current stream, and one copy of each output. The callable Dynamo's frame calls is this object;
AOTAutograd's and Inductor's wrappers run only while the graph is captured.

The outputs are the caller's own tensors (copied out of the graph's memory at every call): kept across calls,
they are never overwritten, unlike ``reduce-overhead``'s. Calls from several threads are serialised (a graph has
one set of input and output buffers); a call on another stream than the last one first waits for the work the
last call queued on its stream, so no copy into the buffers overtakes a replay still reading them.

A graph is used only where replaying it is the whole call: no input mutation, no output aliasing an input, no
effect tokens or functionalized RNG, no CPU work, no data-dependent sizes, every delegate capture-safe (checked at
compile time, ``reasons``). Otherwise, and where a capture fails at run time, the callable runs uncaptured and the
report and one warning say why (the trees runner captures the segments around such parts).
"""
from __future__ import annotations

import threading
from typing import Callable, Optional, Sequence

import torch

from .log import error_text, logger


MAX_GRAPHS = 8  # captured input signatures per compiled graph; later ones run uncaptured (said once)
_WARMED_LIMIT = 64  # signatures remembered as called once; forgotten together past this
_BOUND = "bound"  # _why_not's answer once MAX_GRAPHS are held
_CAPTURE_DEVICE = "cuda"  # (the CPU tests of the runner's bookkeeping replace the capture and this)


def _data_ptrs_at_indices_equal(tensors: list, ptrs: list, indices: list) -> bool:
    """What torch._C._tensors_data_ptrs_at_indices_equal does, for builds of torch without CUDA, which lack it
    (torch 2.13's CPU wheel): there nothing is captured, but the runner's bookkeeping still runs (its tests)."""
    return all(tensors[i].data_ptr() == ptrs[i] for i in indices)


# Resolved once: the per-call check is one C call where torch has it.
_ptrs_equal = getattr(torch._C, "_tensors_data_ptrs_at_indices_equal", _data_ptrs_at_indices_equal)


class WholeGraph:
    """``fn`` (Dynamo's arguments in, a list or tuple of outputs out) replayed from a CUDA graph per input
    signature. ``static``: positions of arguments whose storage is captured as is (weights: Dynamo's static
    inputs); every other tensor argument is copied into the graph's own input buffer at each call. ``checked``:
    those of ``static`` whose storage the graph reads (default: all), compared with the captured pointers at each
    call (a weight baked into an engine is not read through its pointer)."""

    def __init__(self, fn: Callable, static: Sequence[int], name: str, on_fallback: Callable[[str, bool], None],
                 checked: Optional[Sequence[int]] = None):
        self._fn = fn
        self._not_copied = set(static)
        self._checked = sorted(static if checked is None else checked)
        self._name = name
        self._on_fallback = on_fallback  # (why, others captured): a signature runs uncaptured (the report's record)
        self._graphs: dict = {}  # signature -> _Captured, or a str: why that signature runs uncaptured
        self._warmed: set = set()  # signatures called once (captured at their second call)
        # MAX_GRAPHS captured: a new signature runs uncaptured, recorded nowhere and unserialised (sizes may differ
        # at every call)
        self._past_bound = False
        self._copied: Optional[list] = None  # positions of the tensors copied in (from the first call's arguments)
        self._scalars: list = []  # positions of non-tensor arguments (symbolic sizes): part of the signature
        # One call at a time touches the graphs' buffers (threads); the stream the last one queued its work on
        # (its raw handle, and the stream), which a call on another stream waits for.
        self._lock = threading.Lock()
        self._stream_handle: Optional[int] = None
        self._stream = None

    def __call__(self, *args):
        if self._copied is None:
            self._layout(args)
        key = tuple([args[i].shape for i in self._copied] + [args[i] for i in self._scalars])
        with self._lock:
            g = self._graphs.get(key)
            if g.__class__ is _Captured and (not self._checked or _ptrs_equal(
                    list(args), g.static_ptrs, self._checked)):
                if g.device_index is not None and \
                        torch._C._cuda_getCurrentRawStream(g.device_index) != self._stream_handle:
                    self._follow_last_call(g.device_index)
                if g.inputs:
                    torch._foreach_copy_(g.inputs, [args[i] for i in self._copied])
                g.graph.replay()
                return g.copy_out()
            if not (isinstance(g, str) or (g is None and self._past_bound)):
                return self._uncaptured_or_capture(key, args, g)
        return self._fn(*args)  # uncaptured for good: the compiled callable alone, which needs no serialising

    # ------------------------------------------------------------------------------------------ slow path

    def _layout(self, args) -> None:
        self._copied = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor) and i not in self._not_copied]
        self._scalars = [i for i, a in enumerate(args) if not isinstance(a, torch.Tensor)]

    def _follow_last_call(self, device_index: int) -> None:
        """This call's stream (not the last call's) first waits for what the last call queued on its stream: its
        output copies must be done before this call's input copy and replay overwrite the graph's buffers."""
        current = torch.cuda.current_stream(device_index)
        if self._stream is not None:
            current.wait_stream(self._stream)
        self._stream, self._stream_handle = current, current.cuda_stream

    def _uncaptured_or_capture(self, key, args, g):
        if g is not None:  # captured, but a weight is another tensor now: capture again for the new storage
            logger.info("hybrid_trt: %s: a weight's storage changed since its CUDA graph was captured; capturing "
                        "again", self._name)
        elif key not in self._warmed:
            if len(self._warmed) >= _WARMED_LIMIT:  # shapes seen once each (a size that changes every call)
                self._warmed.clear()
            self._warmed.add(key)  # first call of this signature: lazy set-up happens outside any capture
            return self._fn(*args)
        if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
            return self._fn(*args)  # inside the caller's own capture: its graph records this call's kernels
        why = self._why_not(args, g is not None)
        if why is None:
            try:
                captured = _capture(self._fn, args, self._copied, self._checked)
            except Exception as e:  # noqa: BLE001 - a capture failure means: run it uncaptured, and say so
                why = f"capture failed: {error_text(e)}"
        if why is _BOUND:
            self._past_bound = True
            why = f"{MAX_GRAPHS} input shapes captured already (the bound: each graph holds its own memory)"
            logger.warning("hybrid_trt: %s runs without a CUDA graph for inputs %s and every later new input "
                           "shape: %s", self._name, _shapes(key), why)
            self._on_fallback(why, True)
            return self._fn(*args)
        if why is not None:
            self._graphs[key] = why
            logger.warning("hybrid_trt: %s runs without a CUDA graph for inputs %s: %s", self._name, _shapes(key),
                           why)
            self._on_fallback(why, any(g.__class__ is _Captured for g in self._graphs.values()))
            return self._fn(*args)
        self._graphs[key] = captured
        if captured.device_index is not None:
            self._follow_last_call(captured.device_index)
        captured.graph.replay()  # its input buffers hold this call's arguments already
        return captured.copy_out()

    def _why_not(self, args, replacing: bool) -> Optional[str]:
        devices = {a.device.type for a in args if isinstance(a, torch.Tensor)}
        if devices != {_CAPTURE_DEVICE}:
            return f"inputs on {sorted(devices)} (a CUDA graph takes CUDA tensors only)"
        held = sum(g.__class__ is _Captured for g in self._graphs.values())
        if not replacing and held >= MAX_GRAPHS:
            # Each graph keeps its own memory pool (activations for its shape): shapes past the bound run
            # uncaptured rather than let memory grow with every new shape.
            return _BOUND
        return None


class _Captured:
    __slots__ = ("graph", "inputs", "outputs", "static_ptrs", "container", "device_index")

    def __init__(self, graph, inputs, outputs, static_ptrs, container, device_index: Optional[int] = None):
        self.graph, self.inputs, self.outputs = graph, inputs, outputs
        self.static_ptrs, self.container = static_ptrs, container
        self.device_index = device_index  # the CUDA device whose streams calls are ordered on (None: no streams)

    def copy_out(self):
        return self.container(o.clone() if o.__class__ is torch.Tensor else o for o in self.outputs)


def _shapes(key) -> list:
    return [tuple(k) if isinstance(k, torch.Size) else k for k in key]


def _capture(fn, args, copied: list, checked: list) -> _Captured:
    """One capture of ``fn`` on input buffers of its own (a clone of each copied argument), checked for nodes a
    replay must not run (cudagraphs._unreplayable). The graph's memory is its own pool."""
    from .cudagraphs import _inspectable_graph, _unreplayable
    full = list(args)
    inputs = []
    for i in copied:
        buf = torch.empty_strided(args[i].size(), args[i].stride(), dtype=args[i].dtype, device=args[i].device)
        buf.copy_(args[i])
        full[i] = buf
        inputs.append(buf)
    device = inputs[0].device if inputs else next(a.device for a in args if isinstance(a, torch.Tensor))
    torch.cuda.synchronize(device)
    graph = _inspectable_graph()
    try:
        with torch.cuda.graph(graph, capture_error_mode="thread_local"):
            outputs = fn(*full)
    except Exception:
        _release_generator(device)
        raise
    reason = _unreplayable(graph)
    if reason is not None:
        raise RuntimeError(reason)
    if not isinstance(outputs, (list, tuple)):
        raise RuntimeError(f"the compiled callable returned {type(outputs).__name__}, not a list or tuple")
    ptrs = [None] * len(args)  # by argument position, as _ptrs_equal reads them
    for i in checked:
        ptrs[i] = args[i].data_ptr()
    index = device.index if device.index is not None else torch.cuda.current_device()
    return _Captured(graph, inputs, list(outputs), ptrs, type(outputs) if type(outputs) in (list, tuple) else list,
                     index)


def _release_generator(device: torch.device) -> None:
    """After a failed capture: torch's capture_end raises before it releases the default CUDA generator from the
    capture, and every later random op in the process then fails ("Offset increment outside graph capture
    encountered unexpectedly"; seen on the H200). A fresh copy of its state (same seed and offset, not capturing)
    is installed instead."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    gen = torch.cuda.default_generators[index]
    try:
        gen.graphsafe_set_state(gen.clone_state())
    except Exception as e:  # noqa: BLE001 - an older torch without these: nothing more can be done here
        logger.debug("hybrid_trt: the CUDA generator's state was not renewed after a failed capture: %s", e)

