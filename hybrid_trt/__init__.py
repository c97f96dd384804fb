"""hybrid_trt: a TorchDynamo backend that sends what external compilers support to them (TensorRT, ONNX Runtime)
and compiles the rest with TorchInductor, stitched into one callable.

    import hybrid_trt
    compiled = torch.compile(model, backend="hybrid_trt", options={"min_block_size": 3})
"""
from torch._dynamo.backends.registry import register_backend as _register_backend, _COMPILER_FNS

from .backend import hybrid_trt_backend
from .options import Options, make_options, valid_keys
from .report import CompileReport, last_report, reports

if "hybrid_trt" not in _COMPILER_FNS:
    _register_backend(hybrid_trt_backend, name="hybrid_trt")

__all__ = ["hybrid_trt_backend", "Options", "make_options", "valid_keys", "CompileReport", "reports",
           "last_report"]
__version__ = "0.1.0"
