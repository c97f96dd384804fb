"""Attention, whichever kernel tracing picked, as one canonical op: ``hybrid_trt::attention``.

``F.scaled_dot_product_attention`` (called directly, or by ``nn.MultiheadAttention``) is decomposed while it is
traced into a kernel chosen for the device, dtype and backend: ``_scaled_dot_product_flash_attention_for_cpu``,
``_scaled_dot_product_efficient_attention``, ``..._flash_attention``, ``..._cudnn_attention``. Each has its own
signature and returns statistics (log-sum-exp, RNG state) that inference never reads. ``canonicalize_attention``
rewrites every such call whose extra outputs are unused and whose dropout is zero into ``hybrid_trt::attention``,
so one lowering covers them all, on every device. When Inductor runs the op instead, it is decomposed back into
``F.scaled_dot_product_attention``, which picks the same kernel again.
"""
from __future__ import annotations

import operator
from typing import Optional

import torch
import torch.fx as fx
import torch.nn.functional as F
from torch.fx.operator_schemas import normalize_function

aten = torch.ops.aten


@torch.library.custom_op("hybrid_trt::attention", mutates_args=())
def attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attn_mask: Optional[torch.Tensor],
              is_causal: bool, scale: Optional[float], enable_gqa: bool) -> torch.Tensor:
    """``F.scaled_dot_product_attention`` without dropout."""
    return attention_decomposition(query, key, value, attn_mask, is_causal, scale, enable_gqa)


@attention.register_fake
def _(query, key, value, attn_mask, is_causal, scale, enable_gqa):
    return attention_decomposition(query, key, value, attn_mask, is_causal, scale, enable_gqa)


def attention_decomposition(query, key, value, attn_mask, is_causal, scale, enable_gqa):
    return F.scaled_dot_product_attention(query, key, value, attn_mask=attn_mask, dropout_p=0.0,
                                          is_causal=is_causal, scale=scale, enable_gqa=enable_gqa)


# Kernel -> the name its schema gives the additive mask / bias (None: it takes none).
_KERNELS = {
    aten._scaled_dot_product_flash_attention_for_cpu.default: "attn_mask",
    aten._scaled_dot_product_flash_attention.default: None,
    aten._scaled_dot_product_efficient_attention.default: "attn_bias",
    aten._scaled_dot_product_cudnn_attention.default: "attn_bias",
    aten._scaled_dot_product_fused_attention_overrideable.default: "attn_bias",
}


def canonicalize_attention(gm: fx.GraphModule) -> int:
    """In place: attention kernels become ``hybrid_trt::attention`` (see the module doc). Returns how many."""
    rewritten = 0
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target not in _KERNELS:
            continue
        args = _canonical_args(node)
        if args is None:
            continue
        (output,) = [u for u in node.users if u.args[1] == 0]
        with gm.graph.inserting_before(node):
            canonical = gm.graph.call_function(torch.ops.hybrid_trt.attention.default, args)
        canonical.meta.update(output.meta)  # same value, same layout: the fake kernel gives the real strides
        output.replace_all_uses_with(canonical)
        for user in list(node.users):
            gm.graph.erase_node(user)
        gm.graph.erase_node(node)
        rewritten += 1
    if rewritten:
        gm.recompile()
    return rewritten


def _canonical_args(node: fx.Node) -> Optional[tuple]:
    """``hybrid_trt::attention``'s arguments for a kernel call, or None when it does more than that op does."""
    users = list(node.users)
    if not users or any(u.target is not operator.getitem for u in users):
        return None
    if any(u.args[1] != 0 for u in users if u.users) or sum(u.args[1] == 0 for u in users) != 1:
        return None  # a statistic is read, or the output is read through two getitems
    normalized = normalize_function(node.target, node.args, node.kwargs, normalize_to_only_use_kwargs=True)
    if normalized is None:
        return None
    kw = normalized.kwargs
    if kw.get("dropout_p", 0.0) != 0 or isinstance(kw.get("scale"), fx.Node):
        return None
    mask_name = _KERNELS[node.target]
    mask = kw.get(mask_name) if mask_name else None
    q, k = (kw[n].meta.get("val") for n in ("query", "key"))
    if not isinstance(q, torch.Tensor) or not isinstance(k, torch.Tensor) or q.dim() < 3 or k.dim() != q.dim():
        return None
    enable_gqa = q.shape[-3] != k.shape[-3]
    scale = kw.get("scale")
    return (kw["query"], kw["key"], kw["value"], mask, bool(kw.get("is_causal", False)),
            None if scale is None else float(scale), bool(enable_gqa))
