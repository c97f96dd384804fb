"""ONNX Runtime: one InferenceSession per (partition, input-shape signature), fed through IO binding so tensors
cross the boundary by pointer, never through numpy copies."""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
import onnx
import torch

from ..log import logger
from ..capture import preserve  # noqa: F401  (defines hybrid_trt::interpolate, named below)
from ..lowerings.registry import _tensor_dtypes as _dtypes
from .registry import Delegate, Engine, register_delegate

_NUMPY = {
    torch.float32: np.float32, torch.float64: np.float64, torch.float16: np.float16, torch.int64: np.int64,
    torch.int32: np.int32, torch.int16: np.int16, torch.int8: np.int8, torch.uint8: np.uint8, torch.bool: np.bool_,
}
_PROVIDERS = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider",
              "tensorrt": "TensorrtExecutionProvider"}


def _ort():
    import onnxruntime
    return onnxruntime


class OnnxRuntimeEngine(Engine):
    __slots__ = ("_session", "_inputs", "_outputs", "_device", "_dev_type", "_dev_id", "_ort_outputs",
                 "_run_options")

    def __init__(self, session, output_metas: Sequence[torch.Tensor], device: torch.device):
        self._session = session
        self._device = device
        self._dev_type = "cuda" if device.type == "cuda" else "cpu"
        self._dev_id = device.index or 0
        self._inputs = [(i.name, [int(d) for d in i.shape], _NUMPY[_torch_dtype(i.type)])
                        for i in session.get_inputs()]
        self._outputs = [(o.name, tuple(int(s) for s in m.shape), m.dtype, _NUMPY[m.dtype])
                         for o, m in zip(session.get_outputs(), output_metas)]
        # On CPU, outputs come from ONNX Runtime's arena and are handed to torch through DLPack: a fresh
        # torch.empty per call for large outputs goes to the OS (mmap / heap trim) and pays page faults every
        # call, which measured up to ~1 ms per call on a 200 KB output. On CUDA torch's caching allocator is
        # cheap, so outputs are preallocated there.
        self._ort_outputs = device.type == "cpu" and _dlpack_outputs_supported()
        self._run_options = None
        if device.type == "cuda":
            # The session computes on PyTorch's stream (user_compute_stream), so the work on either side of a seam
            # is already ordered; ONNX Runtime's default end-of-run stream synchronisation would only stall the
            # host at every seam. Buffers freed after the call are reused in stream order by both allocators.
            self._run_options = _ort().RunOptions()
            self._run_options.add_run_config_entry("disable_synchronize_execution_providers", "1")

    def __call__(self, inputs):
        # A binding per call: it holds raw pointers to this call's buffers, so sharing one across calls (or
        # threads) would leave it pointing at freed memory.
        binding, dev, dev_id = self._session.io_binding(), self._dev_type, self._dev_id
        keep = [t.contiguous() for t in inputs]  # referenced until the run returns
        for (name, shape, np_dtype), t in zip(self._inputs, keep):
            binding.bind_input(name, dev, dev_id, np_dtype, shape, t.data_ptr())
        if self._ort_outputs:
            for name, _shape, _dtype, _np in self._outputs:
                binding.bind_output(name, dev)
            self._session.run_with_iobinding(binding)
            return [torch.from_dlpack(v._ortvalue) for v in binding.get_outputs()]
        outs = []
        for name, shape, dtype, np_dtype in self._outputs:
            out = torch.empty(shape, dtype=dtype, device=self._device)
            binding.bind_output(name, dev, dev_id, np_dtype, shape, out.data_ptr())
            outs.append(out)
        self._session.run_with_iobinding(binding, self._run_options)
        return outs


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
    aten.convolution.default, aten.avg_pool2d.default, aten._adaptive_avg_pool2d.default,
    aten.upsample_nearest2d.vec, aten.upsample_nearest2d.default, aten.upsample_bilinear2d.vec,
    aten.upsample_bilinear2d.default, torch.ops.hybrid_trt.interpolate.default, aten.erf.default,
    aten.gelu.default, aten.softplus.default, aten.mish.default, aten.hardsigmoid.default,
    aten.hardswish.default, aten.elu.default, aten.atan.default, aten.tan.default,
})


def _on_cuda(node) -> bool:
    val = node.meta.get("val")
    vals = val if isinstance(val, (tuple, list)) else (val,)
    return all(v.device.type == "cuda" for v in vals if isinstance(v, torch.Tensor))


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
            return f"{self.name}: float16 runs on the CUDA provider only (the CPU provider lacks its kernels)"
        if node.target in NO_FLOAT64_CPU_KERNEL and torch.float64 in dtypes:
            return f"{self.name}: no float64 kernel on the CPU provider"
        return None

    def unavailable_reason(self) -> Optional[str]:
        try:
            _ort()
        except ImportError:
            return "onnxruntime is not installed (pip install 'hybrid_trt[onnx]', or onnxruntime-gpu for CUDA)"
        return None

    def validate(self, options) -> None:
        if options.precision != "fp32":
            raise ValueError(
                f"option 'precision'={options.precision!r} is not supported by the onnxruntime delegate, which runs "
                "partitions in the model's own dtypes; use precision='fp32' or delegates=('tensorrt',)")
        if options.onnxruntime_provider != "auto":
            wanted = _PROVIDERS[options.onnxruntime_provider]
            if wanted not in _ort().get_available_providers():
                raise ValueError(
                    f"option 'onnxruntime_provider'={options.onnxruntime_provider!r}: {wanted} is not available in "
                    f"this onnxruntime build (available: {_ort().get_available_providers()})")

    def providers(self, device: torch.device, options) -> list:
        if options.onnxruntime_provider == "auto":
            kind = "cuda" if device.type == "cuda" else "cpu"
        else:
            kind = options.onnxruntime_provider
        if kind == "cpu":
            return ["CPUExecutionProvider"]
        # TF32 follows PyTorch's cuDNN switch (convolutions dominate these models), so precision='fp32' means the
        # same thing on both sides of a seam.
        cuda_opts = {"device_id": device.index or 0, "use_tf32": int(torch.backends.cudnn.allow_tf32)}
        if device.type == "cuda":
            # Run on PyTorch's current stream so no extra synchronisation is needed at the seams.
            cuda_opts["user_compute_stream"] = str(torch.cuda.current_stream(device).cuda_stream)
        chain = [("CUDAExecutionProvider", cuda_opts), "CPUExecutionProvider"]
        if kind == "tensorrt":
            chain.insert(0, ("TensorrtExecutionProvider", {"device_id": device.index or 0}))
        return chain

    def build(self, model: onnx.ModelProto, output_metas, device, options) -> Engine:
        ort = _ort()
        so = ort.SessionOptions()
        threads = options.num_threads or torch.get_num_threads()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.log_severity_level = 3
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        session = ort.InferenceSession(model.SerializeToString(), so, providers=self.providers(device, options))
        logger.debug("onnxruntime session built with providers %s, %d thread(s)", session.get_providers(), threads)
        return OnnxRuntimeEngine(session, output_metas, device)


register_delegate(OnnxRuntimeDelegate())
