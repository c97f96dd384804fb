"""Capture: the ATen-level, functional, decomposed inference graph, and which of its inputs are weights.

Inductor's decomposition table would break ops such as batch norm, layer norm, softmax and upsampling into
primitives; delegates do better with them whole, so every op that has a lowering is kept out of the table.
The remainder left to Inductor is decomposed with Inductor's full table after partitioning.
"""
from __future__ import annotations

import torch


def capture_decompositions() -> dict:
    from torch._inductor.decomposition import select_decomp_table
    from ..lowerings import registered_targets
    from .transformer import DECOMPOSITIONS
    keep = registered_targets()
    return {**{op: fn for op, fn in select_decomp_table().items() if op not in keep}, **DECOMPOSITIONS}


def weight_input_indices(example_inputs) -> set[int]:
    """Dynamo lifts parameters and buffers to graph inputs and marks them as static; those are the weights."""
    out = set()
    for i, t in enumerate(example_inputs):
        if isinstance(t, torch.nn.Parameter) or getattr(t, "_dynamo_static_input_type", None) is not None:
            out.add(i)
    return out


def needs_gradients(example_inputs) -> bool:
    return torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad for t in example_inputs)
