"""Nodes whose value depends on no tensor data (factories, *_like fills): evaluated once per engine build and
stored as initializers, which is what an ONNX exporter would constant-fold them into anyway."""
from __future__ import annotations

import torch

from ..registry import ANY, lowering

aten = torch.ops.aten
prims = torch.ops.prims


def _on_cpu(kwargs):
    return {**{k: v for k, v in kwargs.items() if k != "pin_memory"}, "device": "cpu"}


@lowering(aten.full.default, aten.zeros.default, aten.ones.default, aten.arange.start_step, aten.arange.start,
          aten.arange.default, aten.scalar_tensor.default, prims.iota.default, dtypes=ANY)
def lower_factory(ctx, node):
    value = node.target(*ctx.arg(node.args), **_on_cpu(ctx.arg(dict(node.kwargs))))
    return ctx.tensor_const(value)


@lowering(aten.full_like.default, aten.zeros_like.default, aten.ones_like.default, aten.fill.Scalar, dtypes=ANY)
def lower_fill_like(ctx, node):
    out = ctx.val(node)
    fill = {aten.zeros_like.default: 0, aten.ones_like.default: 1}.get(node.target)
    if fill is None:
        fill = ctx.arg(node.args[1])
    return ctx.tensor_const(torch.full(tuple(out.shape), fill, dtype=out.dtype))
