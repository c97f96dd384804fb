"""TF32 in a delegate's engine follows PyTorch's own switches, so precision="fp32" means what it means in eager.

ONNX Runtime's CUDA provider has one TF32 switch per session (use_tf32) and TensorRT one per engine
(BuilderFlag.TF32, on by default); PyTorch has two: cuDNN convolutions (torch.backends.cudnn.allow_tf32, on by
default) and float32 matmuls (float32_matmul_precision, "highest" by default). An engine uses TF32 only where
PyTorch would for every op kind it holds that the switch reaches, so it is never less precise than eager: a
transformer partition runs its matmuls in full fp32 by default. (With ONNX Runtime's switch following cuDNN's
alone, Swin-V2 fp32 on the H200 differed from eager by 2e-3: its scaled cosine attention amplified TF32's error.)
"""
from __future__ import annotations

from typing import Any, Mapping

import onnx
import torch

_SWITCH = {"Conv": "tf32_convolutions", "ConvTranspose": "tf32_convolutions", "MatMul": "tf32_matmul",
           "Gemm": "tf32_matmul", "Einsum": "tf32_matmul"}


def tf32_switches() -> dict[str, bool]:
    """PyTorch's two switches now (read when a graph is compiled; part of a delegate's options, hence its key)."""
    return {"tf32_convolutions": bool(torch.backends.cudnn.allow_tf32),
            "tf32_matmul": torch.get_float32_matmul_precision() != "highest"}


def uses_tf32(model: onnx.ModelProto, switches: Mapping[str, Any]) -> bool:
    """Whether an engine for the lowered ``model`` may use TF32, given ``switches`` (tf32_switches' keys)."""
    nodes = [*model.graph.node, *(n for f in model.functions for n in f.node)]
    kinds = {_SWITCH[n.op_type] for n in nodes if n.domain in ("", "ai.onnx") and n.op_type in _SWITCH}
    return bool(kinds) and all(switches[k] for k in kinds)
