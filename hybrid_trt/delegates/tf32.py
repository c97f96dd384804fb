"""TF32 in a delegate's engine follows PyTorch's own switches, so precision="fp32" means what it means in eager.

ONNX Runtime's CUDA provider has one TF32 switch per session (use_tf32) and TensorRT one per engine
(BuilderFlag.TF32, on by default); PyTorch has two: cuDNN convolutions (torch.backends.cudnn.allow_tf32, on by
default) and float32 matmuls (float32_matmul_precision, "highest" by default). An engine uses TF32 only where
PyTorch would for every op kind it holds that the switch reaches, so it is never less precise than eager: a
transformer partition runs its matmuls in full fp32 by default. (With ONNX Runtime's switch following cuDNN's
alone, Swin-V2 fp32 on the H200 differed from eager by 2e-3: its scaled cosine attention amplified TF32's error.)

Only float32 ops count: TF32 is a float32 format, and PyTorch runs fp16/bf16 convolutions and matmuls on tensor
cores whatever its switches say. ONNX Runtime's switch reaches further: with use_tf32=0 its CUDA convolutions take
cuDNN's FMA math, which keeps fp16 off the tensor cores (on the H200 the LiDAR example's fp16 partition took 6.6 ms
with TF32 off, in cuDNN's non-tensor-core kernels, against 1.4 ms with it on). So an engine whose convolutions and
matmuls are all fp16/bf16 may use TF32, and one that mixes them with float32 ones follows the float32 ones.
"""
from __future__ import annotations

from typing import Any, Mapping

import onnx
import torch

_REDUCED = {onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16}

_SWITCH = {"Conv": "tf32_convolutions", "ConvTranspose": "tf32_convolutions", "MatMul": "tf32_matmul",
           "Gemm": "tf32_matmul", "Einsum": "tf32_matmul"}


def tf32_switches() -> dict[str, bool]:
    """PyTorch's two switches now (read when a graph is compiled; part of a delegate's options, hence its key)."""
    return {"tf32_convolutions": bool(torch.backends.cudnn.allow_tf32),
            "tf32_matmul": torch.get_float32_matmul_precision() != "highest"}


def uses_tf32(model: onnx.ModelProto, switches: Mapping[str, Any]) -> bool:
    """Whether an engine for the lowered ``model`` may use TF32, given ``switches`` (tf32_switches' keys)."""
    graph = [(_SWITCH[n.op_type], n) for n in model.graph.node if _reached(n)]
    in_functions = [_SWITCH[n.op_type] for f in model.functions for n in f.node if _reached(n)]
    if not graph and not in_functions:
        return False
    if all(switches[k] for k, _ in graph) and all(switches[k] for k in in_functions):
        return True
    types = _DeclaredTypes(model)
    # A function's inner tensors are typed nowhere here: its nodes count as float32 (never less precise).
    full = set(in_functions) | {k for k, n in graph if types.of(n) not in _REDUCED}
    return all(switches[k] for k in full)  # fp16/bf16 alone: TF32 changes nothing PyTorch would not


def _reached(node) -> bool:
    return node.domain in ("", "ai.onnx") and node.op_type in _SWITCH


class _DeclaredTypes:
    """Element types of the main graph's tensors: declared (inputs, outputs, value_info, initializers: a
    convolution's or matmul's weight), else inferred once. A Conv, MatMul or Gemm computes in the element type its
    data inputs share, so any one input whose type is known gives it; unknown counts as float32."""

    def __init__(self, model: onnx.ModelProto):
        self._model = model
        graph = model.graph
        self._types = {t.name: t.data_type for t in graph.initializer}
        self._types.update((v.name, v.type.tensor_type.elem_type) for v in [*graph.input, *graph.value_info,
                                                                              *graph.output]
                           if v.type.HasField("tensor_type"))
        self._inferred = False

    def of(self, node) -> int:
        found = self._known(node)
        if found is None and not self._inferred:
            self._infer()
            found = self._known(node)
        return found if found is not None else onnx.TensorProto.FLOAT

    def _known(self, node):
        return next((self._types[i] for i in node.input[:2] if i in self._types), None)

    def _infer(self) -> None:
        # Inference types intermediate tensors. It serialises the model with its weights; over 2 GB it raises,
        # and those nodes then count as float32.
        self._inferred = True
        try:
            inferred = onnx.shape_inference.infer_shapes(self._model).graph
        except Exception:  # noqa: BLE001 - types unknown: float32 (never less precise)
            return
        for v in inferred.value_info:
            if v.type.HasField("tensor_type"):
                self._types.setdefault(v.name, v.type.tensor_type.elem_type)
