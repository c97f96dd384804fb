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
    heads = (q.shape[-3], k.shape[-3], v.shape[-3])
    if _grouped(enable_gqa, *heads[:2]):
        if not (all(isinstance(h, int) for h in heads) and heads[1] == heads[2] and heads[0] % heads[1] == 0):
            return "grouped-query attention needs static head counts, query heads a multiple of key/value heads"
        if attn_mask is not None:
            return "grouped-query attention with a mask is not lowered"
        heads = (heads[0],) * 3  # as repeated for each query head (enable_gqa); the lowering groups instead
    # Batch dimensions that broadcast (multi-query attention: one key/value head for all query heads, as timm's
    # MobileNetV5 writes it) are what MatMul broadcasts; the output must have the broadcast batch dimensions.
    out = node.meta.get("val")
    batch = _broadcast(*(list(t.shape[:-3]) + [h] for t, h in zip((q, k, v), heads)))
    if batch is None or out is None or not all(map(_same, batch, out.shape[:-2])):
        return "query, key and value batch dimensions that do not broadcast"
    if attn_mask is not None:
        mask = attn_mask.meta.get("val")
        if mask is None or (mask.dtype != torch.bool and mask.dtype != q.dtype):
            return "attention mask must be bool or the query's dtype"
    return None


def _grouped(enable_gqa, q_heads, kv_heads) -> bool:
    """Grouped-query attention: several key/value heads, each shared by a group of query heads."""
    return bool(enable_gqa) and not (_same(kv_heads, q_heads) or _same(kv_heads, 1))


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
    query, key, value, attn_mask, is_causal, scale, enable_gqa = node.args
    dtype = ctx.dtype(query)
    q_shape, k_shape, v_shape = ctx.shape(query), ctx.shape(key), ctx.shape(value)
    rank = len(q_shape)
    scale = 1.0 / math.sqrt(q_shape[-1]) if scale is None else float(scale)
    q_in, k_in, v_in = ctx.input(query), ctx.input(key), ctx.input(value)
    grouped = _grouped(enable_gqa, q_shape[-3], k_shape[-3])
    if grouped:  # query heads [.., kv heads * group, L, E] -> [.., kv heads, group, L, E]; keys/values broadcast
        q_in, k_in, v_in = _group_heads(ctx, q_in, k_in, v_in, q_shape, k_shape[-3])
        rank += 1
    # Scaling the query before the product (not the scores after) keeps float16 scores in range, as PyTorch's
    # kernels do.
    q = ctx.op("Mul", q_in, ctx.const(scale, dtype))
    k_t = ctx.op("Transpose", k_in, perm=list(range(rank - 2)) + [rank - 1, rank - 2])
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
    out = ctx.op("MatMul", weights, v_in)
    if grouped:  # back to one axis of query heads (0: the batch dimensions as they are)
        out = ctx.op("Reshape", out, ctx.ints([0] * (len(q_shape) - 3) + [q_shape[-3], q_shape[-2], v_shape[-1]]))
    return out


def _group_heads(ctx, q, k, v, q_shape, kv_heads: int):
    """enable_gqa's repeat of each key/value head over its group of query heads, as a broadcast: the query split
    into (kv heads, group), keys and values given a group axis of 1."""
    batch = len(q_shape) - 3
    q = ctx.op("Reshape", q, ctx.ints([0] * batch + [kv_heads, q_shape[-3] // kv_heads, q_shape[-2], q_shape[-1]]))
    group_axis = ctx.ints([batch + 1])
    return q, ctx.op("Unsqueeze", k, group_axis), ctx.op("Unsqueeze", v, group_axis)
