"""hybrid_trt: a TorchDynamo backend that sends what external compilers support to them (TensorRT, ONNX Runtime)
and compiles the rest with TorchInductor, stitched into one callable.

    import hybrid_trt
    compiled = torch.compile(model, backend="hybrid_trt", options={"min_block_size": 3})
"""
from torch._dynamo.backends import registry as _dynamo_registry

from .backend import hybrid_trt_backend
from .options import Options, make_options, valid_keys
from .report import CompileReport, last_report, reports
from .guards import skip_guards_on_baked_weights
# The functions shadow the subpackage's name on purpose: ``hybrid_trt.export(...)`` / ``hybrid_trt.load(...)`` /
# ``hybrid_trt.verify(...)``.
from .export import (EXIT_CODES, BuildInDeployMode, DeployedModel, EngineCallFailed, EngineNotInPackage,  # noqa: E402
                     ExportError, PackageError, export, load, verify)


def _register() -> None:
    """Register the name for ``torch.compile`` after ``import hybrid_trt``.

    Without the import, torch finds the name through the ``torch_dynamo_backends`` entry point: it records the
    entry point, loads it (which imports this package) and then registers the loaded function itself, raising on
    a duplicate. So when torch already holds a pending entry point for the name, leave registering to it.
    """
    if "hybrid_trt" in _dynamo_registry._COMPILER_FNS:
        return
    if getattr(_dynamo_registry, "_BACKENDS", {}).get("hybrid_trt") is not None:
        return  # entry point discovered by torch; lookup_backend registers it
    _dynamo_registry.register_backend(hybrid_trt_backend, name="hybrid_trt")


_register()

__all__ = ["hybrid_trt_backend", "Options", "make_options", "valid_keys", "CompileReport", "reports",
           "last_report", "export", "load", "verify", "ExportError", "PackageError", "EngineNotInPackage",
           "EngineCallFailed", "BuildInDeployMode", "DeployedModel", "EXIT_CODES", "skip_guards_on_baked_weights"]
__version__ = "0.1.0"
