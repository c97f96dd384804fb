"""What the sparse plugin adds to the backend: its lowerings (ONNX domain ``hybrid_trt.sparse``, accepted by
the TensorRT delegate) and, when TensorRT is installed, the TensorRT plugins that run those nodes. ``activate`` is
called by the plugin registry (hybrid_trt/plugins/registry.py) when a graph first calls a ``hybrid_trt::sparse_*``
op."""

import importlib.util

from ...log import logger


def activate() -> None:
    # TensorRT's plugins first: if importing TensorRT fails, nothing is registered (no lowering whose nodes
    # TensorRT would then be unable to parse). trt_plugin imports the lowerings itself.
    if importlib.util.find_spec("tensorrt") is not None:
        from . import trt_plugin  # noqa: F401
    else:
        logger.debug("tensorrt not installed: sparse TensorRT plugins not registered")
    from . import lowering  # noqa: F401  (its @lowering functions register themselves)
