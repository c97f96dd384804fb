"""Scaled dot-product attention (``hybrid_trt::attention``, see capture/attention.py): MatMul, Softmax, MatMul."""
from __future__ import annotations

import math

import torch

from ...capture import attention as _defines_op  # noqa: F401  (defines hybrid_trt::attention)
from ..registry import BOOL, FLOAT, lowering


def _check_attention(node):
    query, key, value, attn_mask, _is_causal, _scale, _enable_gqa = node.args
    q, k, v = (t.meta.get("val") for t in (query, key, value))
    if any(t is None for t in (q, k, v)) or not q.dtype.is_floating_point:
        return "query, key and value must be floating-point tensors"
    if not 3 <= q.dim() == k.dim() == v.dim():
        return "query, key and value must have one rank of at least 3"
    if q.shape[:-2] != k.shape[:-2] or k.shape[:-2] != v.shape[:-2]:
        return "grouped-query or broadcast batch dimensions (not lowered)"
    if attn_mask is not None:
        mask = attn_mask.meta.get("val")
        if mask is None or (mask.dtype != torch.bool and mask.dtype != q.dtype):
            return "attention mask must be bool or the query's dtype"
    return None


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
