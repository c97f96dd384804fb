"""External compilers that take ONNX partitions. Importing this registers the built-in delegates."""
from .registry import (Delegate, Engine, accept_domain, available_delegates, delegate_names, get_delegate,
                       honouring_precision, register_delegate, usable_of)
# Registration order is the default priority order: TensorRT first.
from . import tensorrt_delegate, onnxruntime_delegate  # noqa: F401,E402

__all__ = ["Delegate", "Engine", "accept_domain", "available_delegates", "delegate_names", "get_delegate",
           "honouring_precision", "register_delegate", "usable_of"]
