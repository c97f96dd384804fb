"""ONNX Runtime: one InferenceSession per engine (a partition at one input-shape signature, or at a range of shapes,
engines/ranges.py), fed through IO binding so tensors cross the boundary by pointer, never through numpy copies."""
from __future__ import annotations

import json
import logging
import os
import tempfile
import threading
from typing import Any, Callable, Mapping, Optional, Sequence

import numpy as np
import onnx
import torch

from ..log import logger
from ..capture import preserve  # noqa: F401  (defines hybrid_trt::interpolate, named below)
from ..lowerings.context import GENERIC, ORT_CPU
from ..lowerings.registry import _tensor_dtypes as _dtypes
from . import external_data
from .registry import Delegate, Engine, dtype_declined, import_failure, register_delegate
from .tf32 import tf32_switches, uses_tf32

_NUMPY = {
    torch.float32: np.float32, torch.float64: np.float64, torch.float16: np.float16, torch.int64: np.int64,
    torch.int32: np.int32, torch.int16: np.int16, torch.int8: np.int8, torch.uint8: np.uint8, torch.bool: np.bool_,
}
_PROVIDERS = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider",
              "tensorrt": "TensorrtExecutionProvider"}


def _ort():
    import onnxruntime
    return onnxruntime


# ONNX Runtime's intra-op workers spin while they wait for the next parallel op of a run, and by default go on
# spinning for a while after the run returns. Those idle spinners took the cores that the next piece of work needed:
# another model's session, or Inductor's OpenMP kernels between two partitions (issue 7: two models on 2 cores took
# 125 ms back to back instead of ~62 ms; benchmarks/results/cpu_2core_multimodel.md). So spinning is stopped the
# moment each run returns (``session.force_spinning_stop``) and restarts with the next run, where it pays: with
# blocking workers every parallel op waits for its workers to wake, and an op-heavy graph (timm's DeiT-T on 2 cores)
# ran 1.2x slower (cpu_2core_multimodel.md, session 40). Not one thread pool shared by all sessions instead: it
# must be configured before ONNX Runtime's process-wide environment exists (the user or another library may have
# created it already). The inter-op pool is unused (sequential execution) and does not spin.
THREAD_POOL_CONFIG = {"session.intra_op.allow_spinning": "1", "session.force_spinning_stop": "1",
                      "session.inter_op.allow_spinning": "0"}
_SHAPES_LIMIT = 256  # input shapes whose output shapes a model for a range of shapes remembers (CUDA)


def _session_options(threads: int):
    """Options of every session this delegate builds (also used to rebuild a session from stored ONNX bytes)."""
    ort = _ort()
    severity = _configure_ort_logging(ort)
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.log_severity_level = severity
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    for key, value in THREAD_POOL_CONFIG.items():
        so.add_session_config_entry(key, value)
    return so


_ORT_FATAL, _ORT_WARNING = 4, 2


def _configure_ort_logging(ort) -> int:
    """Keep ONNX Runtime's own log lines off the user's terminal; returns the severity sessions should use.

    ONNX Runtime writes through its process-wide default logger, not Python's logging: cuDNN frontend messages
    at ERROR level while it tries plans on CUDA fp16 (results are right), and "No registered plugin EP device
    found" warnings at session creation. Every failure that matters also comes back as an exception from session
    creation or run, which the runtime turns into a fallback warning on the ``hybrid_trt`` logger (or raises,
    with strict=True), so only FATAL lines pass. When the ``hybrid_trt`` logger is at DEBUG, ONNX Runtime's
    warnings and errors are forwarded to it at DEBUG level instead. Called before each session is created (cheap
    and idempotent, so it follows the logger's level and needs no process-wide flag of our own)."""
    debug = logger.isEnabledFor(logging.DEBUG)
    severity = _ORT_WARNING if debug else _ORT_FATAL
    if debug and hasattr(ort, "set_default_logger_callback"):  # onnxruntime >= 1.32
        ort.set_default_logger_callback(_forward_ort_log, severity)
    else:
        ort.set_default_logger_severity(severity)
    return severity


def _forward_ort_log(severity: int, category: str, logid: str, code_location: str, message: str) -> None:
    logger.debug("onnxruntime [%s] %s (%s)", "VIWEF"[min(max(severity, 0), 4)], message, code_location)


class OnnxRuntimeEngine(Engine):
    __slots__ = ("_session", "_inputs", "_outputs", "_device", "_dev_type", "_dev_id", "_ort_outputs", "_cpu_call",
                 "_run_options", "_stream", "_local", "serialized", "_empty", "_empty_ptr", "_cold", "_captured",
                 "_shapes_by_input")

    def __init__(self, session, output_metas: Sequence[torch.Tensor], device: torch.device,
                 stream: Optional["torch.cuda.Stream"] = None):
        self._session = session
        self._device = device
        self._dev_type = "cuda" if device.type == "cuda" else "cpu"
        self._dev_id = device.index or 0
        # (name, numpy dtype): each call binds an input with its own shape, which ONNX Runtime checks.
        self._inputs = [(i.name, _NUMPY[_torch_dtype(i.type)]) for i in session.get_inputs()]
        self._outputs = [(o.name, tuple(int(s) for s in m.shape), m.dtype, _NUMPY[m.dtype])
                         for o, m in zip(session.get_outputs(), output_metas)]
        ranged = any(not isinstance(d, int) for o in session.get_outputs() for d in o.shape)
        # On CPU, outputs come from ONNX Runtime's arena and are handed to torch through DLPack: a fresh
        # torch.empty per call for large outputs goes to the OS (mmap / heap trim) and pays page faults every
        # call, which measured up to ~1 ms per call on a 200 KB output. On CUDA torch's caching allocator is
        # cheap, so outputs are torch's there: Inductor's CUDA-graph trees require every output of a graph they
        # warm up or capture to be an allocation from their pool, and ONNX Runtime's own are not ("storage data
        # ptrs are not allocated in pool", H100). A model for a range of shapes learns its output sizes at the
        # first run of each input shape (_output_shapes).
        self._ort_outputs = device.type == "cpu" and _dlpack_outputs_supported()
        if ranged and device.type == "cpu" and not self._ort_outputs:
            raise RuntimeError("a model with dynamic output sizes needs DLPack outputs, which this onnxruntime "
                               "lacks; engines per shape are used instead")
        self._shapes_by_input = {} if ranged and device.type == "cuda" else None
        # A tensor with no elements may have a null data pointer, which IO binding rejects ("buffer_ptr = 0" on
        # CUDA); no byte of it is ever read or written, so any valid pointer on the device stands in for it.
        self._empty = torch.empty(1, dtype=torch.uint8, device=device)  # owns the stand-in pointer
        self._empty_ptr = self._empty.data_ptr()
        self._cpu_call = (_cpu_call(session, self._inputs, self._outputs, self._empty_ptr)
                          if self._ort_outputs and device.type == "cpu" else None)
        self._run_options = None
        # CUDA: the session computes on its own stream (the CUDA provider's user_compute_stream, set at build);
        # each call is ordered against the caller's current stream by a pair of events (see _run_cuda).
        self._stream = stream
        self._local = threading.local()  # per-thread event pair: a shared pair could be re-recorded by another
        if stream is not None:           # thread between one thread's record and its wait
            # For runs a CUDA graph captures: ONNX Runtime's end-of-run synchronisation is a host sync, which a
            # capture cannot contain. Only those runs skip it (see _run_cuda for why the others must not).
            self._run_options = _ort().RunOptions()
            self._run_options.add_run_config_entry("disable_synchronize_execution_providers", "1")
        self._captured = None  # the input specs of a run a CUDA graph captured, if any (see __del__)
        # CUDA: the first call runs the session twice. ONNX Runtime plans a session's memory pattern in its first
        # run and allocates that pattern in the second (cuDNN's frontend also settles its plans and workspace
        # then); a run that allocates cannot be captured in a CUDA graph (cudaMalloc invalidates a thread-local
        # capture: "Failed to allocate memory" / CUDNN_FE failure seen on the H200). Inductor's CUDA-graph trees
        # capture the second call of a shape, so from then on no run may allocate.
        self._cold = stream is not None

    def __del__(self):
        # A run a CUDA graph captured skipped ONNX Runtime's end-of-run clean-up, so the pinned staging buffers its
        # kernels used (which the graph's replays read) are still queued for release on the session's stream.
        # Released with the session, they would be freed in a CUDA host callback holding the last reference to
        # the provider's pinned arena, whose cudaFreeHost is not permitted there (error 800: the process aborts).
        # One synchronised run releases them while the session is alive; nothing can replay the graph any more
        # (it held this engine).
        captured, stream = getattr(self, "_captured", None), getattr(self, "_stream", None)
        if captured is None or stream is None:
            return
        try:
            binding = self._session.io_binding()
            zeros = [torch.zeros(shape, dtype=dtype, device=self._device) for shape, dtype in captured]
            for (name, np_dtype), t in zip(self._inputs, zeros):
                binding.bind_input(name, self._dev_type, self._dev_id, np_dtype, t.shape,
                                   t.data_ptr() or self._empty_ptr)
            for name, *_ in self._outputs:
                binding.bind_output(name, self._dev_type, self._dev_id)
            with torch.cuda.stream(stream):
                self._session.run_with_iobinding(binding)  # synchronised: runs the clean-up
        except Exception:  # noqa: BLE001 - interpreter shutdown, or a CUDA error already reported elsewhere
            pass

    def __call__(self, inputs):
        if self._cpu_call is not None:  # the CPU path, prepared at construction (see _cpu_call)
            return self._cpu_call(inputs)
        # A binding per call: it holds raw pointers to this call's buffers, so sharing one across calls (or
        # threads) would leave it pointing at freed memory.
        binding, dev, dev_id = self._session.io_binding(), self._dev_type, self._dev_id
        keep = [t.contiguous() for t in inputs]  # referenced until the run returns
        # Each input is bound with its own shape, which ONNX Runtime checks against the model's: a call with a
        # shape the engine was not built for fails with an error instead of reading past the end of the buffer.
        for (name, np_dtype), t in zip(self._inputs, keep):
            binding.bind_input(name, dev, dev_id, np_dtype, t.shape, t.data_ptr() or self._empty_ptr)
        if self._ort_outputs:
            for name, _shape, _dtype, _np in self._outputs:
                binding.bind_output(name, dev, dev_id)
            self._execute(binding, keep)
            return [torch.from_dlpack(v._ortvalue) for v in binding.get_outputs()]
        shapes = self._output_shapes(keep) if self._shapes_by_input is not None else None
        outs = []
        for k, (name, shape, dtype, np_dtype) in enumerate(self._outputs):
            shape = shape if shapes is None else shapes[k]
            out = torch.empty(shape, dtype=dtype, device=self._device)
            binding.bind_output(name, dev, dev_id, np_dtype, shape, out.data_ptr() or self._empty_ptr)
            outs.append(out)
        self._execute(binding, keep)
        return outs

    def _output_shapes(self, inputs: list) -> list:
        """A range model's output shapes for these input shapes: looked up, or learnt from one run with outputs
        ONNX Runtime allocates. That run is also the one in which ONNX Runtime plans the new shape's memory, so the
        run that follows (into torch's outputs) allocates it, and a CUDA graph's capture, which comes after a
        warm-up call of the same shape, allocates nothing."""
        key = tuple(tuple(t.shape) for t in inputs)
        shapes = self._shapes_by_input.get(key)
        if shapes is not None:
            return shapes
        if self._stream is not None and torch.cuda.is_current_stream_capturing():
            raise RuntimeError(f"hybrid_trt: input shapes {list(key)} reached a CUDA graph capture without a "
                               "warm-up run of the same shapes; ONNX Runtime would allocate during the capture")
        binding, dev, dev_id = self._session.io_binding(), self._dev_type, self._dev_id
        for (name, np_dtype), t in zip(self._inputs, inputs):
            binding.bind_input(name, dev, dev_id, np_dtype, t.shape, t.data_ptr() or self._empty_ptr)
        for name, *_ in self._outputs:
            binding.bind_output(name, dev, dev_id)
        self._execute(binding, inputs)
        if len(self._shapes_by_input) >= _SHAPES_LIMIT:  # a size new at every call: the oldest shape goes
            del self._shapes_by_input[next(iter(self._shapes_by_input))]
        shapes = self._shapes_by_input[key] = [tuple(v.shape()) for v in binding.get_outputs()]
        return shapes

    def _execute(self, binding, inputs: list) -> None:
        if self._stream is None:
            self._session.run_with_iobinding(binding, self._run_options)
            return
        self._run_cuda(binding, inputs)
        if self._cold:  # see __init__: the first call runs twice on CUDA
            self._cold = False
            self._run_cuda(binding, inputs)

    def _run_cuda(self, binding, inputs: list) -> None:
        """Run on the session's stream, ordered after everything already queued on the caller's current stream
        (the producers of the inputs, and earlier users of the memory the inputs and outputs now occupy), and
        with the caller's stream ordered after the run. That holds for any caller stream, default or one set with
        ``torch.cuda.stream(...)``, whatever stream was current at build time.

        Memory stays safe without ``record_stream``: every tensor the run touches was allocated on the caller's
        stream before the fork event, and the caller's stream waits for the join event before this returns, so
        whatever reuses those blocks later (on the caller's stream, the only one the caching allocator hands them
        to) comes after the run. Under capture: event record and stream waits only, no host synchronisation, the
        pattern ``torch.cuda.graph`` capture accepts (the session stream joins the capture through the fork
        event); ``inputs``: the bound input tensors, whose specs a captured run records (see __del__)."""
        events = getattr(self._local, "events", None)
        if events is None:
            events = self._local.events = (torch.cuda.Event(), torch.cuda.Event())
        fork, join = events
        caller = torch.cuda.current_stream(self._device)
        fork.record(caller)
        self._stream.wait_event(fork)
        # ONNX Runtime releases a run's pinned staging buffers (CPU-side inputs of Concat, Resize, TopK... kernels)
        # only in its end-of-run synchronisation. A run without it leaves them queued until the session is
        # released: pinned memory grows with every call, and the release then aborts the process (see __del__).
        # So only a run that a CUDA graph captures, where a host sync is impossible, skips it; every other run
        # ends with a host sync on the session's stream.
        if torch.cuda.is_current_stream_capturing():
            self._captured = [(tuple(t.shape), t.dtype) for t in inputs]
            self._session.run_with_iobinding(binding, self._run_options)
        else:
            self._session.run_with_iobinding(binding)
        join.record(self._stream)
        caller.wait_event(join)


def _cpu_call(session, inputs: list, outputs: list, empty_ptr: int) -> Optional[Callable]:
    """The CPU engine call, on ONNX Runtime's own binding objects (None where this onnxruntime lacks them; the
    engine then binds through the public wrappers). It binds exactly what ``OnnxRuntimeEngine.__call__`` binds,
    but everything that does not change between calls is resolved here once: the public ``IOBinding`` wrapper
    builds an ``OrtDevice`` for every bind and checks for WebGPU graph capture at every run, about half of the
    engine's own per-call time on a one-input model (``benchmarks/results/overhead_cpu_2core.md``)."""
    try:
        from onnxruntime.capi import _pybind_state
        c_session = session._sess
        device = _ort().OrtDevice.make("cpu", 0)._get_c_device()
        new_binding = _pybind_state.SessionIOBinding
        run = c_session.run_with_iobinding
    except (ImportError, AttributeError):
        return None
    in_specs = list(inputs)
    out_names = [name for name, *_ in outputs]
    out_indices = range(len(out_names))
    from_dlpack = torch.from_dlpack

    def call(tensors):
        # A binding per call: it holds raw pointers to this call's buffers (see OnnxRuntimeEngine.__call__).
        binding = new_binding(c_session)
        keep = [t.contiguous() for t in tensors]  # referenced until the run returns
        for (name, np_dtype), t in zip(in_specs, keep):  # each with its own shape, which ONNX Runtime checks
            binding.bind_input(name, device, np_dtype, t.shape, t.data_ptr() or empty_ptr)
        for name in out_names:
            binding.bind_output(name, device)  # allocated from ONNX Runtime's arena, handed over by DLPack
        run(binding, None)
        values = binding.get_outputs()
        # Indexed, not iterated: iterating the returned OrtValueVector ends in an IndexError raised through
        # pybind11, which alone cost ~50 us per call. The capsule, not the OrtValue: given the object, torch asks
        # for DLPack 1.0 first (``max_version``), which onnxruntime's binding refuses with a TypeError that torch
        # catches before asking again: 7.9 against 2.7 us per output (onnxruntime 1.32, torch 2.14).
        return [from_dlpack(values[i].__dlpack__()) for i in out_indices]
    return call


def _dlpack_outputs_supported() -> bool:
    from onnxruntime.capi import _pybind_state
    return hasattr(_pybind_state.OrtValue, "__dlpack__")


_ORT_TYPES = {"tensor(float)": torch.float32, "tensor(double)": torch.float64, "tensor(float16)": torch.float16,
              "tensor(int64)": torch.int64, "tensor(int32)": torch.int32, "tensor(int16)": torch.int16,
              "tensor(int8)": torch.int8, "tensor(uint8)": torch.uint8, "tensor(bool)": torch.bool}


def _torch_dtype(ort_type: str) -> torch.dtype:
    return _ORT_TYPES[ort_type]


aten = torch.ops.aten

# ATen ops whose lowerings emit ONNX ops that ONNX Runtime's CPU provider has no float64 kernel for (Conv,
# AveragePool, GlobalAveragePool, Resize, Erf, Softplus, HardSigmoid, Elu, Atan, Tan): a float64 node of these
# would make the whole partition fail to build. tests/test_lowerings.py checks that every other float64 sample
# builds, so this set cannot silently fall short.
NO_FLOAT64_CPU_KERNEL = frozenset({
    aten.convolution.default, aten.avg_pool2d.default, aten.avg_pool3d.default, aten._adaptive_avg_pool2d.default,
    aten._adaptive_avg_pool3d.default,
    aten.upsample_nearest2d.vec, aten.upsample_nearest2d.default, aten.upsample_bilinear2d.vec,
    aten.upsample_bilinear2d.default, torch.ops.hybrid_trt.interpolate.default, aten.erf.default,
    aten.gelu.default, aten.softplus.default, aten.mish.default, aten.hardsigmoid.default,
    aten.hardswish.default, aten.elu.default, aten.atan.default, aten.tan.default,
})


# ONNX Runtime's CPU ScatterND and ScatterElements (index_put, scatter, scatter_add, scatter_reduce) copy their whole
# data tensor and write element by element: on pillar canvases and BEV grids they ran 1.5-5x Inductor's in-place
# scatter and mostly slower than eager too (benchmarks/probe_cpu_scatter.py, results/cpu_scatter_2core.md). On the
# CPU provider these stay with Inductor; on CUDA (and TensorRT) they are delegated.
SLOW_ON_CPU = frozenset({aten.index_put.default, aten.scatter.src, aten.scatter.value, aten.scatter.reduce,
                         aten.scatter.value_reduce, aten.scatter_add.default, aten.scatter_reduce.two})


def _on_cuda(node) -> bool:
    val = node.meta.get("val")
    vals = val if isinstance(val, (tuple, list)) else (val,)
    return all(v.device.type == "cuda" for v in vals if isinstance(v, torch.Tensor))


_SESSION_FILE = "session.json"  # stored beside the model: the session settings decided from the lowered model


def session_settings(model: onnx.ModelProto, device: torch.device, options: Mapping[str, Any]) -> dict:
    """The per-session switches decided from the lowered model: TF32 (``tf32.uses_tf32``) and, on the CUDA
    provider, the NHWC layout (``cuda_layout_nhwc``)."""
    nhwc = _provider_kind(device, options) == "cuda" and cuda_layout_nhwc(model, options.get("cuda_layout", "auto"))
    return {"use_tf32": uses_tf32(model, options), "prefer_nhwc": bool(nhwc)}


def cuda_layout_nhwc(model: onnx.ModelProto, layout: str) -> bool:
    """Whether the CUDA provider runs the model's convolutions channels-last (``prefer_nhwc``): the option's
    value, or for ``auto``: where the model holds float16 2-D convolutions and none of them is grouped.

    Measured on the H200 (benchmarks/results/cudagraphs_h200.md, session 6: whole models under ONNX Runtime's
    own CUDA graph): channels-last took 0.63-0.98x the time of NCHW for ResNet-18/50 in float16 (cuDNN's NHWC
    tensor-core kernels, without the layout transposes around each convolution), but 1.01-1.07x for models of
    depthwise convolutions (MobileNetV3, EfficientNet-B0, ConvNeXt-T at batch 1) and up to 1.16x in float32."""
    if layout != "auto":
        return layout == "nhwc"
    dtypes = _value_dtypes(model.graph)
    nodes = [*model.graph.node, *(n for f in model.functions for n in f.node)]
    convs = [n for n in nodes if n.domain in ("", "ai.onnx") and n.op_type == "Conv"]
    if not convs or any(_group(n) != 1 for n in convs):
        return False
    return any(dtypes.get(n.input[1]) == (onnx.TensorProto.FLOAT16, 4) for n in convs)


def _group(node: onnx.NodeProto) -> int:
    return next((a.i for a in node.attribute if a.name == "group"), 1)


def _value_dtypes(graph: onnx.GraphProto) -> dict:
    """Value name -> (element type, rank), where the model says (initializers, inputs, value_info)."""
    out = {t.name: (t.data_type, len(t.dims)) for t in graph.initializer}
    for v in [*graph.input, *graph.value_info]:
        tt = v.type.tensor_type
        if tt.HasField("shape"):
            out.setdefault(v.name, (tt.elem_type, len(tt.shape.dim)))
    return out


def _stored_settings(files: Mapping[str, bytes]) -> dict:
    stored = json.loads(files[_SESSION_FILE]) if _SESSION_FILE in files else {}
    return {"use_tf32": bool(stored.get("use_tf32", False)), "prefer_nhwc": bool(stored.get("prefer_nhwc", False))}


def _provider_kind(device: torch.device, options: Mapping[str, Any]) -> str:
    if options["provider"] == "auto":
        return "cuda" if device.type == "cuda" else "cpu"
    return options["provider"]


class OnnxRuntimeDelegate(Delegate):
    name = "onnxruntime"
    # float16 only on CUDA (node_unsupported_reason): the CPU provider lacks kernels for most ops in it.
    # No bfloat16: neither provider covers it.
    dtypes = frozenset({torch.float32, torch.float64, torch.float16, torch.int64, torch.int32, torch.int8,
                        torch.uint8, torch.bool})

    @property
    def device_types(self):
        try:
            providers = _ort().get_available_providers()
        except ImportError:
            return frozenset()
        return frozenset({"cpu"} | ({"cuda"} if "CUDAExecutionProvider" in providers else set()))

    def node_unsupported_reason(self, node) -> Optional[str]:
        dtypes = set(_dtypes(node))
        # Every float16 sample of tests/test_lowerings.py builds and matches eager on the CUDA provider (checked on
        # a GPU machine by test_float16_lowering_runs_on_cuda_or_is_declined).
        if torch.float16 in dtypes and not _on_cuda(node):
            return dtype_declined(self.name, torch.float16,
                                  "on the CPU provider (it lacks the kernels; float16 runs on the CUDA provider)")
        if node.target in NO_FLOAT64_CPU_KERNEL and torch.float64 in dtypes:
            return f"{self.name}: no float64 kernel on the CPU provider"
        if node.target in SLOW_ON_CPU and not _on_cuda(node):
            return (f"{self.name}: its CPU scatter kernels copy the whole tensor and write element by element, "
                    "slower than Inductor's in-place write (delegated on CUDA)")
        return None

    def unavailable_reason(self) -> Optional[str]:
        return import_failure(_ort, "onnxruntime", "pip install 'hybrid_trt[onnx]', or onnxruntime-gpu for CUDA",
                              needs="InferenceSession")

    def unusable_with(self, delegate_options: Mapping[str, Any]) -> Optional[str]:
        provider = delegate_options["provider"]
        if provider == "auto":
            return None
        wanted, available = _PROVIDERS[provider], _ort().get_available_providers()
        if wanted in available:
            return None
        needs = {"cuda": "onnxruntime-gpu", "tensorrt": "onnxruntime-gpu and NVIDIA's TensorRT libraries"}
        return (f"option 'onnxruntime_provider'={provider!r} asks for {wanted}, which this "
                f"onnxruntime build lacks (it has {', '.join(available)}; {wanted} needs "
                f"{needs.get(provider, 'another onnxruntime build')})")

    def providers(self, device: torch.device, options, stream: Optional["torch.cuda.Stream"] = None,
                  settings: Optional[Mapping[str, bool]] = None) -> list:
        """``settings``: the per-session switches decided from the lowered model (``session_settings``)."""
        kind = _provider_kind(device, options)
        if kind == "cpu":
            return ["CPUExecutionProvider"]
        settings = settings or {}
        cuda_opts = {"device_id": device.index or 0, "use_tf32": int(settings.get("use_tf32", False)),
                     "prefer_nhwc": int(settings.get("prefer_nhwc", False))}
        trt_opts = {"device_id": device.index or 0}
        if stream is not None:
            # A non-null user_compute_stream makes the provider run every kernel and copy on that one stream
            # (has_user_compute_stream follows from it). Never torch's default stream: its handle is 0, which
            # ONNX Runtime reads as "no stream given" and then computes on a stream of its own.
            cuda_opts["user_compute_stream"] = trt_opts["user_compute_stream"] = str(stream.cuda_stream)
        chain = [("CUDAExecutionProvider", cuda_opts), "CPUExecutionProvider"]
        if kind == "tensorrt":
            chain.insert(0, ("TensorrtExecutionProvider", trt_opts))
        return chain

    def session(self, model_bytes: bytes, device: torch.device, options: Mapping[str, Any],
                optimized_path: Optional[str] = None, optimize: bool = True,
                settings: Optional[Mapping[str, bool]] = None, external: Optional[Mapping[str, bytes]] = None):
        """A session for serialized ONNX ``model_bytes`` and, on CUDA, the stream it computes on (else None).
        ``optimized_path``: ONNX Runtime writes the optimized model there; ``optimize=False``: ``model_bytes`` is
        such an optimized model, loaded without graph optimization. ``settings``: see ``session_settings``.
        ``external``: the model's external-data files (``external_data.serialize``), by the name it refers to."""
        threads = options["threads"]
        # A stream of the session's own, not the caller's: the caller's stream may change from call to call
        # (torch.cuda.stream), while the session's is fixed at creation; OnnxRuntimeEngine orders the two.
        on_gpu = device.type == "cuda" and _provider_kind(device, options) != "cpu"
        stream = torch.cuda.Stream(device=device) if on_gpu else None
        so = _session_options(threads)
        external_data.add_to_session(so, external or {})
        if optimized_path is not None:
            so.optimized_model_filepath = optimized_path
            if external:  # the optimized model holds the same weights: past 2 GB too
                so.add_session_config_entry("session.optimized_model_external_initializers_file_name",
                                            external_data.data_file(os.path.basename(optimized_path)))
        if not optimize:
            so.graph_optimization_level = _ort().GraphOptimizationLevel.ORT_DISABLE_ALL
        session = _ort().InferenceSession(model_bytes, so, providers=self.providers(device, options, stream, settings))
        logger.debug("onnxruntime session built with providers %s, %d thread(s)", session.get_providers(), threads)
        return session, stream

    def options_from(self, options) -> dict[str, Any]:
        # PyTorch's TF32 switches at compile time (tf32.uses_tf32) are engine settings too.
        return {"provider": options.onnxruntime_provider, "threads": options.num_threads or torch.get_num_threads(),
                "cuda_layout": options.onnxruntime_cuda_layout, **tf32_switches()}

    def library_version(self) -> str:
        ort = _ort()
        return f"{ort.__version__} ({','.join(ort.get_available_providers())})"

    def lowering_target(self, device: torch.device, delegate_options: Mapping[str, Any]) -> str:
        return ORT_CPU if _provider_kind(device, delegate_options) == "cpu" else GENERIC

    def capture_unsafe_reason(self, device: torch.device, delegate_options: Mapping[str, Any]) -> Optional[str]:
        # The CUDA provider runs every kernel on the session's own stream (user_compute_stream), joined to the
        # caller's stream by events, with IO binding on device pointers and the end-of-run sync disabled
        # (OnnxRuntimeEngine._run_cuda): the pattern torch.cuda.graph capture accepts.
        kind = _provider_kind(device, delegate_options)
        if device.type != "cuda" or kind == "cpu":
            return "onnxruntime runs this partition on the CPU"
        if kind != "cuda":
            return f"onnxruntime's {_PROVIDERS[kind]} is not declared capture-safe (builds engines lazily)"
        return None

    def host_synchronizes(self, device: torch.device, delegate_options: Mapping[str, Any]) -> bool:
        # Every uncaptured run ends with ONNX Runtime's end-of-run synchronisation, where it releases its pinned
        # staging buffers (OnnxRuntimeEngine._run_cuda says why it cannot be skipped).
        return device.type == "cuda" and _provider_kind(device, delegate_options) != "cpu"

    def build(self, model: onnx.ModelProto, output_metas, device, delegate_options: Mapping[str, Any],
              keep_serialized: bool = False) -> Engine:
        model_bytes, external = external_data.serialize(model, "model.onnx")
        settings = session_settings(model, device, delegate_options)
        if not keep_serialized:
            session, stream = self.session(model_bytes, device, delegate_options, settings=settings,
                                           external=external)
            return OnnxRuntimeEngine(session, output_metas, device, stream)
        # Stored form: the lowered model, and the model as ONNX Runtime optimized it for this provider and
        # machine (the key covers both), so that a load skips graph optimization. TensorRT's provider compiles
        # nodes, which cannot be saved as ONNX: only the lowered model is stored for it; nor can the CUDA
        # provider's NHWC layout pass, whose nodes (internal NHWC domain) are not for reloading.
        files = {"model.onnx": model_bytes, **external, _SESSION_FILE: json.dumps(settings).encode()}
        with tempfile.TemporaryDirectory(prefix="hybrid_trt_ort_") as tmp:
            unsaveable = _provider_kind(device, delegate_options) == "tensorrt" or settings["prefer_nhwc"]
            path = None if unsaveable else os.path.join(tmp, "optimized.onnx")
            session, stream = self.session(model_bytes, device, delegate_options, optimized_path=path,
                                           settings=settings, external=external)
            if path is not None and os.path.exists(path):
                for name in ("optimized.onnx", external_data.data_file("optimized.onnx")):
                    if os.path.exists(os.path.join(tmp, name)):
                        with open(os.path.join(tmp, name), "rb") as f:
                            files[name] = f.read()
        engine = OnnxRuntimeEngine(session, output_metas, device, stream)
        engine.serialized = files
        return engine

    def serialize(self, engine: Engine) -> dict[str, bytes]:
        files = getattr(engine, "serialized", None)
        if files is None:
            raise RuntimeError("onnxruntime engine was built without keep_serialized=True")
        engine.serialized = None  # handed to the store once; the session does not need the bytes
        return files

    def deploy_files(self, names) -> set:
        # The optimized model is what loads (with graph optimization off); the lowered one is only its backup
        # for a cache whose optimized form fails to load, which a package's verified environment rules out.
        model = {"optimized.onnx"} if "optimized.onnx" in names else {"model.onnx"} & set(names)
        return model | ({_SESSION_FILE, *map(external_data.data_file, model)} & set(names))

    def load(self, files: Mapping[str, bytes], output_metas, device, delegate_options: Mapping[str, Any]) -> Engine:
        # The optimized model's fused nodes (FusedConv, FusedMatMul...) no longer tell the session's settings: they
        # were decided from the lowered model at build and stored with it.
        settings = _stored_settings(files)
        if "optimized.onnx" in files:
            # Read before the fallback below: a stored file that fails its checksum raises the store's error, which
            # removes the entry to be rebuilt; caught here, the entry's other half served it, and nothing was stored
            # again (its warning said "rebuilt").
            optimized, external = files["optimized.onnx"], _data_files(files, "optimized.onnx")
            try:
                session, stream = self.session(optimized, device, delegate_options, optimize=False,
                                               settings=settings, external=external)
                return OnnxRuntimeEngine(session, output_metas, device, stream)
            except Exception as e:  # noqa: BLE001 - the lowered model is stored beside it
                if "model.onnx" not in files:  # a package ships only the form that loads (deploy_files)
                    raise
                logger.debug("onnxruntime: stored optimized model did not load (%s); optimizing the lowered one", e)
        session, stream = self.session(files["model.onnx"], device, delegate_options, settings=settings,
                                       external=_data_files(files, "model.onnx"))
        return OnnxRuntimeEngine(session, output_metas, device, stream)


def _data_files(files: Mapping[str, bytes], model_name: str) -> dict[str, bytes]:
    """The stored external-data file of ``model_name`` (``external_data.serialize``), if it has one."""
    name = external_data.data_file(model_name)
    return {name: files[name]} if name in files else {}


register_delegate(OnnxRuntimeDelegate())
