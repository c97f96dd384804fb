"""Importing this package registers every built-in lowering (one module per op family)."""
from . import (activation, attention, constant, conv, deform, elementwise, fold, indexing, linear,  # noqa: F401
               normalization, pooling, quantize, reduction, resize, resize_aa, roi, sampling, scatter, search,
               shape)
