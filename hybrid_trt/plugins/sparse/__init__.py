"""3D sparse convolution for point-cloud models (SECOND / CenterPoint style).

Importing this package registers the ``hybrid_trt::sparse_*`` custom ops.
See docs/sparse.md for the API, weight layout and rulebook format.
"""

from . import ops
from .modules import (
    Rulebook,
    SparseConv3d,
    SparseConvTensor,
    SparseInverseConv3d,
    SparseSequential,
    SubMConv3d,
)

__all__ = [
    "ops",
    "Rulebook",
    "SparseConv3d",
    "SparseConvTensor",
    "SparseInverseConv3d",
    "SparseSequential",
    "SubMConv3d",
]
