"""PyTorch's fused transformer encoder layer, traced as the ops it computes.

``nn.TransformerEncoderLayer`` in eval mode under ``torch.no_grad()`` takes PyTorch's fast path: one
``aten._transformer_encoder_layer_fwd`` call per layer, an op with no decomposition and no lowering, so nothing of
a DETR-style ``batch_first`` encoder was delegated (the same encoder with ``batch_first=False``, which skips the
fast path, was delegated whole). The capture decomposes it into what the op computes (ATen's
``transformer_encoder_layer_forward``): layer norms, the packed input projection, scaled dot-product attention
(which becomes ``hybrid_trt::attention``), the output projection, the feed-forward block and the residual adds.
Calls with an attention mask or a nested-tensor input stay whole (``NotImplemented``): the fast path's masks mean
"hide" where SDPA's bool masks mean "keep", and nested tensors do not trace.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


def encoder_layer_decomposition(src, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias,
                                use_gelu, norm_first, eps, norm_weight_1, norm_bias_1, norm_weight_2, norm_bias_2,
                                ffn_weight_1, ffn_bias_1, ffn_weight_2, ffn_bias_2, mask=None, mask_type=None):
    if mask is not None or src.is_nested or src.dim() != 3:
        return NotImplemented

    def norm(x, weight, bias):
        return F.layer_norm(x, (embed_dim,), weight, bias, eps)

    x = norm(src, norm_weight_1, norm_bias_1) if norm_first else src
    x = src + _self_attention(x, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias)
    if not norm_first:
        x = norm(x, norm_weight_1, norm_bias_1)
    y = norm(x, norm_weight_2, norm_bias_2) if norm_first else x
    y = F.linear(y, ffn_weight_1, ffn_bias_1)
    y = F.linear(F.gelu(y) if use_gelu else F.relu(y), ffn_weight_2, ffn_bias_2)
    x = x + y
    return x if norm_first else norm(x, norm_weight_2, norm_bias_2)


def _self_attention(x, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias):
    """The fast path's input is batch-first: (batch, tokens, embed)."""
    b, t, e = x.shape
    q, k, v = (z.reshape(b, t, num_heads, e // num_heads).transpose(1, 2)
               for z in F.linear(x, qkv_weight, qkv_bias).chunk(3, dim=-1))
    out = F.scaled_dot_product_attention(q, k, v)
    return F.linear(out.transpose(1, 2).reshape(b, t, e), proj_weight, proj_bias)


DECOMPOSITIONS = {torch.ops.aten._transformer_encoder_layer_fwd.default: encoder_layer_decomposition}
