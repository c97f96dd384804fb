"""Scaled dot-product attention (``hybrid_trt::attention``, see capture/attention.py): MatMul, Softmax, MatMul."""
from __future__ import annotations

import math
from typing import Optional

import torch
from torch.fx.experimental.symbolic_shapes import statically_known_true

from ...capture import attention as _defines_op  # noqa: F401  (defines hybrid_trt::attention)
from ..registry import BOOL, FLOAT, lowering


def _check_attention(node):
    query, key, value, attn_mask, _is_causal, _scale, enable_gqa = node.args
    q, k, v = (t.meta.get("val") for t in (query, key, value))
    if any(t is None for t in (q, k, v)) or not q.dtype.is_floating_point:
        return "query, key and value must be floating-point tensors"
    if not 3 <= q.dim() == k.dim() == v.dim():
        return "query, key and value must have one rank of at least 3"
    if enable_gqa and not (_same(k.shape[-3], q.shape[-3]) or _same(k.shape[-3], 1)):
        return "grouped-query attention with several key/value heads (enable_gqa) is not lowered"
    # Batch dimensions that broadcast (multi-query attention: one key/value head for all query heads, as timm's
    # MobileNetV5 writes it) are what MatMul broadcasts; the output must have the broadcast batch dimensions.
    out = node.meta.get("val")
    batch = _broadcast(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    if batch is None or out is None or not all(map(_same, batch, out.shape[:-2])):
        return "query, key and value batch dimensions that do not broadcast"
    if attn_mask is not None:
        mask = attn_mask.meta.get("val")
        if mask is None or (mask.dtype != torch.bool and mask.dtype != q.dtype):
            return "attention mask must be bool or the query's dtype"
    return None


def _same(a, b) -> bool:
    """Known equal without a guard (symbolic sizes: only when the expressions say so)."""
    return bool(statically_known_true(a == b))


def _broadcast(*shapes) -> Optional[list]:
    """The broadcast of equal-rank ``shapes``, or None when a dimension has two sizes other than 1."""
    out = []
    for sizes in zip(*shapes):
        big = [s for s in sizes if not _same(s, 1)]
        if any(not _same(s, big[0]) for s in big[1:]):
            return None
        out.append(big[0] if big else 1)
    return out


@lowering(torch.ops.hybrid_trt.attention.default, dtypes=FLOAT | BOOL, check=_check_attention)
def lower_attention(ctx, node):
    query, key, value, attn_mask, is_causal, scale, _enable_gqa = node.args
    dtype = ctx.dtype(query)
    q_shape, k_shape = ctx.shape(query), ctx.shape(key)
    rank = len(q_shape)
    scale = 1.0 / math.sqrt(q_shape[-1]) if scale is None else float(scale)
    # Scaling the query before the product (not the scores after) keeps float16 scores in range, as PyTorch's
    # kernels do.
    q = ctx.op("Mul", ctx.input(query), ctx.const(scale, dtype))
    k_t = ctx.op("Transpose", ctx.input(key), perm=list(range(rank - 2)) + [rank - 1, rank - 2])
    scores = ctx.op("MatMul", q, k_t)
    if is_causal:
        keep = torch.ones(q_shape[-2], k_shape[-2], dtype=torch.bool).tril()
        scores = ctx.op("Where", ctx.tensor_const(keep), scores, ctx.const(float("-inf"), dtype))
    if attn_mask is not None:
        mask = ctx.input(attn_mask)
        if ctx.dtype(attn_mask) == torch.bool:  # added as 0 / -inf, as PyTorch converts it: a NaN score stays NaN
            mask = ctx.op("Where", mask, ctx.const(0.0, dtype), ctx.const(float("-inf"), dtype))
        scores = ctx.op("Add", scores, mask)
    weights = ctx.op("Softmax", scores, axis=-1)
    if attn_mask is not None:
        # A row the mask hides entirely is all -inf, whose Softmax is NaN; PyTorch gives zeros there. Only such
        # rows: a NaN that comes from the data stays NaN, as in eager. (Equal, not IsInf: IsInf takes no float16
        # before opset 20.)
        hidden = ctx.op("ReduceMin", ctx.cast(ctx.op("Equal", scores, ctx.const(float("-inf"), dtype)), dtype),
                        axes=[-1], keepdims=1)
        weights = ctx.op("Where", ctx.op("Greater", hidden, ctx.const(0.0, dtype)), ctx.const(0.0, dtype), weights)
    return ctx.op("MatMul", weights, ctx.input(value))
