"""PyTorch's fused transformer encoder layer, traced as the ops it computes.

``nn.TransformerEncoderLayer`` in eval mode under ``torch.no_grad()`` takes PyTorch's fast path: one
``aten._transformer_encoder_layer_fwd`` call per layer, an op with no decomposition and no lowering, so nothing of
a DETR-style ``batch_first`` encoder was delegated (the same encoder with ``batch_first=False``, which skips the
fast path, was delegated whole). The capture decomposes it into what the op computes (ATen's
``transformer_encoder_layer_forward``): layer norms, the packed input projection, attention, the output
projection, the feed-forward block and the residual adds.

Without a mask, attention is scaled dot-product attention (which becomes ``hybrid_trt::attention``). With one
(a key padding mask, or an attention mask, which ``nn.TransformerEncoder`` passes as a float mask of 0 and -inf),
it is what ATen's ``masked_softmax`` computes, written out: any nonzero mask entry hides that key, and a query
whose keys are all hidden gets NaN, as in eager. Scaled dot-product attention would give that query zeros, so it
is not used there. Nested-tensor inputs stay whole (``NotImplemented``): they do not trace.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


def encoder_layer_decomposition(src, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias,
                                use_gelu, norm_first, eps, norm_weight_1, norm_bias_1, norm_weight_2, norm_bias_2,
                                ffn_weight_1, ffn_bias_1, ffn_weight_2, ffn_bias_2, mask=None, mask_type=None):
    if src.is_nested or src.dim() != 3:
        return NotImplemented
    hidden = None
    if mask is not None:
        hidden = _hidden_keys(mask, mask_type, src.shape[0], num_heads, src.shape[1])
        if hidden is None:  # a mask ATen rejects: the op stays whole, so the user sees ATen's own error
            return NotImplemented

    def norm(x, weight, bias):
        return F.layer_norm(x, (embed_dim,), weight, bias, eps)

    x = norm(src, norm_weight_1, norm_bias_1) if norm_first else src
    x = src + _self_attention(x, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias, hidden)
    if not norm_first:
        x = norm(x, norm_weight_1, norm_bias_1)
    y = norm(x, norm_weight_2, norm_bias_2) if norm_first else x
    y = F.linear(y, ffn_weight_1, ffn_bias_1)
    y = F.linear(F.gelu(y) if use_gelu else F.relu(y), ffn_weight_2, ffn_bias_2)
    x = x + y
    return x if norm_first else norm(x, norm_weight_2, norm_bias_2)


def _hidden_keys(mask, mask_type, batch: int, heads: int, tokens: int):
    """The mask as a bool tensor broadcastable to (batch, heads, queries, keys), True where a key is hidden, or
    None for a mask type and shape ATen's ``_masked_softmax`` rejects. ATen converts a float mask to bool, so any
    nonzero entry (the -inf of a canonical mask, but also any other value) hides."""
    expected = {0: (tokens, tokens), 1: (batch, tokens), 2: (batch, heads, tokens, tokens)}.get(mask_type)
    if expected is None or tuple(mask.shape) != expected:
        return None
    hidden = mask if mask.dtype == torch.bool else mask != 0
    if mask_type == 0:  # (queries, keys), shared by every sequence and head
        return hidden.reshape(1, 1, tokens, tokens)
    if mask_type == 1:  # key padding: (batch, keys)
        return hidden.reshape(batch, 1, 1, tokens)
    return hidden


def _self_attention(x, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias, hidden=None):
    """The fast path's input is batch-first: (batch, tokens, embed)."""
    b, t, e = x.shape
    q, k, v = (z.reshape(b, t, num_heads, e // num_heads).transpose(1, 2)
               for z in F.linear(x, qkv_weight, qkv_bias).chunk(3, dim=-1))
    if hidden is None:
        out = F.scaled_dot_product_attention(q, k, v)
    else:  # ATen scales the query before the product, then applies masked_softmax
        scores = (q * (e // num_heads) ** -0.5) @ k.transpose(-2, -1)
        out = scores.masked_fill(hidden, float("-inf")).softmax(-1) @ v
    return F.linear(out.transpose(1, 2).reshape(b, t, e), proj_weight, proj_bias)


DECOMPOSITIONS = {torch.ops.aten._transformer_encoder_layer_fwd.default: encoder_layer_decomposition}
