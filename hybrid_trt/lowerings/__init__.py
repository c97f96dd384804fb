"""ATen -> ONNX lowerings: the registry (one small function per op family) and the partition-to-ONNX driver."""
from .registry import Lowering, lowering, lowering_for, registered_targets
from .to_onnx import LoweringError, lower_to_onnx

__all__ = ["Lowering", "lowering", "lowering_for", "registered_targets", "LoweringError", "lower_to_onnx"]
