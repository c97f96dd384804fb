"""3D sparse convolution for point-cloud models (SECOND / CenterPoint style).

Importing this package registers the ``hybrid_trt::sparse_*`` custom ops,
their ONNX lowerings (domain ``hybrid_trt.sparse``, TensorRT delegate only)
and, when TensorRT is installed, the TensorRT plugins that run those nodes.
See docs/sparse.md for the API, weight layout and rulebook format.
"""

import importlib.util

from ...log import logger
from . import lowering, ops
from .modules import (
    Rulebook,
    SparseConv3d,
    SparseConvTensor,
    SparseInverseConv3d,
    SparseSequential,
    SubMConv3d,
    batch_norm_features,
)

if importlib.util.find_spec("tensorrt") is not None:
    from . import trt_plugin  # noqa: F401
else:
    logger.debug("tensorrt not installed: sparse TensorRT plugins not registered")

__all__ = [
    "ops",
    "Rulebook",
    "SparseConv3d",
    "SparseConvTensor",
    "SparseInverseConv3d",
    "SparseSequential",
    "SubMConv3d",
    "batch_norm_features",
]
