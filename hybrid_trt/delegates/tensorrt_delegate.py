"""TensorRT: parse the partition's ONNX with TensorRT's OnnxParser, build a serialized engine per input-shape
signature, and run it with ``execute_async_v3`` on PyTorch's current CUDA stream. Stored form: the serialized
engine (``plan``); loading deserializes it, no build. The builder's timing cache (tactic timings per layer) is
shared by every build with one TensorRT version on one kind of GPU (``build_cache_name``): each build starts from
the cache the store holds and leaves it extended, so later builds of similar layers skip those measurements.
A model for a range of input shapes (``engines/ranges.py``: dynamic dims as ``dim_param``, which the ONNX parser
makes -1) is built with one optimization profile, min/opt/max from the model's metadata; its engine sets the
input shapes of each call and sizes the outputs from the context.

Written against TensorRT 10's documented Python API. TensorRT cannot be installed on the machines this project
is developed on, so this module has not been run; it stays thin on purpose.
"""
from __future__ import annotations

import os
import tempfile
import threading
from typing import Any, Mapping, Optional

import onnx
import torch

from ..log import logger
from ..engines.ranges import profile_of
from . import external_data
from .registry import Delegate, Engine, import_failure, register_delegate
from .tf32 import tf32_switches, uses_tf32


def _trt():
    import tensorrt
    return tensorrt


def set_precision_flags(trt, config, model: onnx.ModelProto, delegate_options: Mapping[str, Any]) -> None:
    """Reduced precision where the option asks for it; TF32 (on by default in a TensorRT builder config) only
    where PyTorch would use it for every convolution and matmul of the partition (tf32.uses_tf32)."""
    if delegate_options["precision"] == "fp16":
        config.set_flag(trt.BuilderFlag.FP16)
    elif delegate_options["precision"] == "bf16":
        config.set_flag(trt.BuilderFlag.BF16)
    if not uses_tf32(model, delegate_options):
        config.clear_flag(trt.BuilderFlag.TF32)


def profile_shapes(profile: Mapping[str, tuple], network_inputs) -> list[tuple]:
    """(input name, (min, opt, max)) for every network input, in network order; the profile must name each."""
    missing = [n for n in network_inputs if n not in profile]
    if missing:
        raise RuntimeError(f"the model's optimization profile names no shapes for input(s) {missing}")
    return [(name, tuple(tuple(int(d) for d in s) for s in profile[name])) for name in network_inputs]


class TensorRTEngine(Engine):
    def __init__(self, engine, output_metas, device: torch.device, serialized: Optional[dict] = None):
        trt = _trt()
        self._engine = engine
        self.serialized = serialized  # {"plan": bytes} until the store takes it
        self._context = engine.create_execution_context()
        self._device = device
        names = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)]
        self._input_names = [n for n in names if engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT]
        self._output_names = [n for n in names if engine.get_tensor_mode(n) == trt.TensorIOMode.OUTPUT]
        self._outputs = [(tuple(int(s) for s in m.shape), m.dtype) for m in output_metas]
        ranged = any(d < 0 for n in self._input_names for d in engine.get_tensor_shape(n))
        self._bind = self._bind_ranged if ranged else self._bind_static
        # One execution context: its bindings and its activation memory serve one execution at a time. Calls
        # from several threads are serialised here, and a call on another stream than the last one's waits for
        # that execution on the GPU.
        self._lock = threading.Lock()
        self._last_stream = None

    def __call__(self, inputs):
        keep = [t.contiguous() for t in inputs]
        stream = torch.cuda.current_stream(self._device)
        with self._lock:
            if self._last_stream is not None and self._last_stream != stream \
                    and not torch.cuda.is_current_stream_capturing():  # a capture orders its own work
                stream.wait_stream(self._last_stream)
            self._last_stream = stream
            outs = self._bind(keep)
            if not self._context.execute_async_v3(stream.cuda_stream):
                raise RuntimeError("TensorRT execute_async_v3 failed for this call (TensorRT's own error is in the log "
                                   "above: commonly inputs outside the engine's optimization profile, or out of "
                                   "device memory)")
        return outs

    def _bind_static(self, inputs) -> list:
        ctx = self._context
        for name, t in zip(self._input_names, inputs):
            ctx.set_tensor_address(name, t.data_ptr())
        outs = [torch.empty(shape, dtype=dtype, device=self._device) for shape, dtype in self._outputs]
        for name, out in zip(self._output_names, outs):
            ctx.set_tensor_address(name, out.data_ptr())
        return outs

    def _bind_ranged(self, inputs) -> list:
        ctx = self._context
        for name, t in zip(self._input_names, inputs):
            if not ctx.set_input_shape(name, tuple(t.shape)):
                raise RuntimeError(f"TensorRT: input {name} shape {tuple(t.shape)} is outside the engine's profile")
            ctx.set_tensor_address(name, t.data_ptr())
        # Output sizes follow the input shapes just set.
        outs = [torch.empty(tuple(ctx.get_tensor_shape(name)), dtype=dtype, device=self._device)
                for name, (_shape, dtype) in zip(self._output_names, self._outputs)]
        for name, out in zip(self._output_names, outs):
            ctx.set_tensor_address(name, out.data_ptr())
        return outs


# TensorRT's TopK layer (the topk and sort lowerings' ONNX TopK): k <= 3840, an axis among the last four, and
# int32/int64/float16/float32/bfloat16 data (docs.nvidia.com/deeplearning/tensorrt/latest/_static/operators/TopK.html).
# A node past these would fail the whole partition's build; declined, it stays with Inductor with the reason.
_TOPK_MAX_K = 3840
_TOPK_DTYPES = frozenset({torch.int32, torch.int64, torch.float16, torch.float32, torch.bfloat16})
_TOPK = frozenset({torch.ops.aten.topk.default, torch.ops.aten.sort.default, torch.ops.aten.sort.stable})
# Ops whose ONNX form TensorRT's parser imports only through one of TensorRT's own plugins, which this delegate
# does not register (it builds without libnvinfer_plugin's creators): declined, so ONNX Runtime takes them.
_PLUGIN_ONLY = {"torchvision.roi_align.default": "tensorrt: RoiAlign imports only as TensorRT's ROIAlign_TRT plugin, "
                                                 "which hybrid_trt does not register"}


def topk_unsupported_reason(node) -> Optional[str]:
    """Why TensorRT's TopK layer cannot take this topk or sort (sort: k is the whole dim), or None."""
    x = node.args[0].meta.get("val")
    if not isinstance(x, torch.Tensor):
        return None
    if node.target is torch.ops.aten.topk.default:
        k, dim = node.args[1], node.args[2] if len(node.args) > 2 else node.kwargs.get("dim", -1)
    else:
        dim = node.kwargs.get("dim", node.args[1] if len(node.args) > 1 else -1)
        k = x.shape[dim] if x.dim() else 1
    if x.dtype not in _TOPK_DTYPES:
        return f"tensorrt: TopK takes no {str(x.dtype).replace('torch.', '')} data"
    if x.dim() > 4 and dim % x.dim() < x.dim() - 4:
        return f"tensorrt: TopK along dim {dim} of a {x.dim()}-d tensor (its axis must be one of the last four)"
    if not isinstance(k, int):
        return f"tensorrt: TopK of a dynamic count ({k}); TensorRT's TopK takes a static k <= {_TOPK_MAX_K}"
    if k > _TOPK_MAX_K:
        return f"tensorrt: TopK of {k} elements (TensorRT's TopK takes at most {_TOPK_MAX_K})"
    return None


class TensorRTDelegate(Delegate):
    name = "tensorrt"
    dtypes = frozenset({torch.float32, torch.float16, torch.bfloat16, torch.int32, torch.int64, torch.int8,
                        torch.uint8, torch.bool})
    device_types = frozenset({"cuda"})
    precisions = frozenset({"fp32", "fp16", "bf16"})  # builder flags (set_precision_flags)

    def unavailable_reason(self) -> Optional[str]:
        problem = import_failure(_trt, "tensorrt", "pip install 'hybrid_trt[gpu]' on a machine with NVIDIA's TensorRT",
                                 needs="Builder")
        if problem:
            return problem
        if not torch.cuda.is_available():
            return "no CUDA device"
        return None

    def node_unsupported_reason(self, node) -> Optional[str]:
        if str(node.target) in _PLUGIN_ONLY:
            return _PLUGIN_ONLY[str(node.target)]
        return topk_unsupported_reason(node) if node.target in _TOPK else None

    def options_from(self, options) -> dict[str, Any]:
        return {"precision": options.precision, "workspace_bytes": options.tensorrt_workspace_bytes, **tf32_switches()}

    def library_version(self) -> str:
        return str(_trt().__version__)

    def capture_unsafe_reason(self, device: torch.device, delegate_options: Mapping[str, Any]) -> Optional[str]:
        # TensorRT documents capturing execute_async_v3 in a CUDA graph once the context has run once (its lazy
        # allocations done), with static shapes; cudagraphs.py's probe does that warm-up run. Not run here.
        return None if device.type == "cuda" else "TensorRT runs on CUDA devices only"

    def build_cache_name(self, device: torch.device, delegate_options: Mapping[str, Any]) -> Optional[str]:
        props = torch.cuda.get_device_properties(device)
        name = f"tensorrt-timing-{self.library_version()}-sm{props.major}{props.minor}-{props.name}"
        return "".join(c if c.isalnum() or c in "._-" else "-" for c in name)  # a file name the store takes

    def build(self, model: onnx.ModelProto, output_metas, device, delegate_options: Mapping[str, Any],
              keep_serialized: bool = False, build_cache: Optional[bytes] = None) -> Engine:
        trt = _trt()
        trt_logger = trt.Logger(trt.Logger.WARNING)
        builder = trt.Builder(trt_logger)
        network = builder.create_network(0)  # explicit batch is the only mode in TensorRT 10
        parser = trt.OnnxParser(network, trt_logger)
        if not _parse(parser, model):
            errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
            raise RuntimeError(f"TensorRT could not parse the partition: {errors}")
        config = builder.create_builder_config()
        config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, delegate_options["workspace_bytes"])
        profile = profile_of(model)
        if profile is not None:  # a model for a range of shapes: one optimization profile over the range
            trt_profile = builder.create_optimization_profile()
            for name, (lo, opt, hi) in profile_shapes(profile, [network.get_input(i).name
                                                                for i in range(network.num_inputs)]):
                trt_profile.set_shape(name, lo, opt, hi)
            config.add_optimization_profile(trt_profile)
        set_precision_flags(trt, config, model, delegate_options)
        _attach_timing_cache(config, build_cache)
        serialized = builder.build_serialized_network(network, config)
        if serialized is None:
            raise RuntimeError("TensorRT failed to build the engine (see the TensorRT log above)")
        engine = trt.Runtime(trt_logger).deserialize_cuda_engine(serialized)
        logger.debug("TensorRT engine built (%d bytes)", serialized.nbytes)
        if not keep_serialized:  # no store: nothing to keep, the timing cache included
            return TensorRTEngine(engine, output_metas, device)
        built = TensorRTEngine(engine, output_metas, device, {"plan": bytes(serialized)})
        built.build_cache = bytes(config.get_timing_cache().serialize())
        return built

    def serialize(self, engine: Engine) -> dict[str, bytes]:
        files, engine.serialized = engine.serialized, None
        if files is None:
            raise RuntimeError("TensorRT engine was built without keep_serialized=True")
        return files

    def load(self, files: Mapping[str, bytes], output_metas, device, delegate_options) -> Engine:
        trt = _trt()
        # The plan may hold any plugin's nodes (the sparse rulebook plugins exist only in Python): their creators
        # must be registered before it is deserialised, whatever this process has compiled so far.
        from ..plugins.registry import activate_all
        activate_all()
        engine = trt.Runtime(trt.Logger(trt.Logger.WARNING)).deserialize_cuda_engine(files["plan"])
        if engine is None:
            raise RuntimeError("TensorRT could not deserialize the stored engine (see TensorRT's log above; an "
                               "engine loads only with the TensorRT version and GPU model it was built with): "
                               "rebuild it (a compile replaces the cache entry) or re-export the package here")
        return TensorRTEngine(engine, output_metas, device)


def _attach_timing_cache(config, shared: Optional[bytes]) -> None:
    """Start the build from the shared timing cache (tactic timings of earlier builds on this kind of GPU: layers
    timed before are not measured again) when TensorRT accepts it, else from an empty one. ignore_mismatch=False:
    timings taken on another device are refused rather than used."""
    if shared:
        try:
            cache = config.create_timing_cache(shared)
            if cache is not None and config.set_timing_cache(cache, ignore_mismatch=False):
                return
            logger.debug("hybrid_trt: TensorRT refused the stored timing cache; this build measures every tactic")
        except Exception as e:  # noqa: BLE001 - a damaged cache costs measurements, never the build
            logger.debug("hybrid_trt: the stored TensorRT timing cache does not load (%s); not used", e)
    config.set_timing_cache(config.create_timing_cache(b""), ignore_mismatch=False)


def _parse(parser, model) -> bool:
    """Parse ``model``; weights past 2 GB go through a directory (the parser reads external data from files named
    relative to the model's ``path``, read while it parses)."""
    model_bytes, external = external_data.serialize(model, "model.onnx")
    if not external:
        return parser.parse(model_bytes)
    with tempfile.TemporaryDirectory(prefix="hybrid_trt_trt_") as tmp:
        for name, data in external.items():
            with open(os.path.join(tmp, name), "wb") as f:
                f.write(data)
        return parser.parse(model_bytes, os.path.join(tmp, "model.onnx"))


register_delegate(TensorRTDelegate())
