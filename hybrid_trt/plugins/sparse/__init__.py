"""3D sparse convolution for point-cloud models (SECOND / CenterPoint style).

Importing this package defines the ``hybrid_trt::sparse_*`` custom ops and
their modules. Their ONNX lowerings (domain ``hybrid_trt.sparse``, TensorRT
delegate only) and, when TensorRT is installed, the TensorRT plugins that run
those nodes are registered by ``activation.activate``, which the plugin
registry calls when a graph first calls one of the ops. See docs/sparse.md for the
API, weight layout and rulebook format.
"""

from . import ops
from .modules import (
    Rulebook,
    SparseConv3d,
    SparseConvTensor,
    SparseInverseConv3d,
    SparseSequential,
    SubMConv3d,
    batch_norm_features,
)

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
