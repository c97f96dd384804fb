"""Importing this package registers every built-in lowering (one module per op family)."""
from . import (activation, attention, constant, conv, elementwise, indexing, linear, normalization, pooling,  # noqa: F401
               quantize, reduction, resize, sampling, scatter, search, shape)
