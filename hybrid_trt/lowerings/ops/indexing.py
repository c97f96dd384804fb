"""Gathers: index_select, embedding, gather, advanced indexing (index.Tensor, _unsafe_index.Tensor), topk, sort."""
from __future__ import annotations

import operator

import numpy as np
import torch

from ..registry import ANY, NUMERIC, lowering
from ._util import dims, reshape

aten = torch.ops.aten


@lowering(aten.index_select.default, dtypes=ANY)
def lower_index_select(ctx, node):
    x, dim, index = node.args
    if not ctx.shape(x):  # 0-d: ONNX Gather needs rank >= 1; gather from it as a 1-element vector
        picked = ctx.op("Gather", reshape(ctx, ctx.input(x), [1]), _no_wrap(ctx, index), axis=0)
        return reshape(ctx, picked, ctx.shape(node))
    axis = dims(ctx.arg(dim), len(ctx.shape(x)))[0]
    return ctx.op("Gather", ctx.input(x), _no_wrap(ctx, index), axis=axis)


@lowering(aten.embedding.default, dtypes=ANY)
def lower_embedding(ctx, node):
    weight, indices = node.args[:2]
    return ctx.op("Gather", ctx.input(weight), _no_wrap(ctx, indices), axis=0)


def _no_wrap(ctx, index) -> str:
    """``index`` for ONNX's Gather/GatherElements where ATen rejects a negative index (index_select, embedding,
    gather raise IndexError): ONNX would wrap it and read another row, silently. A negative index is moved past
    any end instead, where the delegate rejects it as ATen does (ONNX Runtime's CPU provider: "out of bounds")."""
    idx = ctx.input(index, torch.int64)
    if _non_negative(index):  # top-k/sort/arg-max positions: nothing to move, no pass over the indices per run
        return idx
    return ctx.op("Where", ctx.op("Less", idx, ctx.const(0, torch.int64)), ctx.const(_PAST_ANY_END, torch.int64), idx)


_PAST_ANY_END = 2**63 - 1
# Ops whose integer output is a position, never negative, and views that keep its values.
_POSITIONS = frozenset({aten.topk.default, aten.sort.default, aten.sort.stable, aten.argmax.default,
                        aten.argmin.default, aten.argsort.default, aten.argsort.stable})
_SAME_VALUES = frozenset({aten.view.default, aten.reshape.default, aten.expand.default, aten.unsqueeze.default,
                          aten.squeeze.dim, aten.squeeze.default, aten.clone.default, aten.flatten.using_ints,
                          aten._unsafe_view.default, aten.permute.default})


def _non_negative(node) -> bool:
    """Whether ``node`` (an FX node) holds positions by construction: an op of _POSITIONS (its indices output),
    seen through views that keep the values."""
    while getattr(node, "op", None) == "call_function" and node.target in _SAME_VALUES:
        node = node.args[0]
    if getattr(node, "op", None) != "call_function":
        return False
    if node.target is operator.getitem:  # (values, indices) = topk(...) / sort(...)
        source, item = node.args
        return item == 1 and getattr(source, "target", None) in _POSITIONS
    return node.target in _POSITIONS


def _check_gather(node):
    if node.kwargs.get("sparse_grad"):
        return "sparse_grad"
    x, index = node.args[0].meta.get("val"), node.args[2].meta.get("val")
    if isinstance(x, torch.Tensor) and isinstance(index, torch.Tensor) and x.dim() != index.dim():
        # ATen accepts an empty index of any rank; ONNX GatherElements needs equal ranks.
        return f"index rank {index.dim()} differs from input rank {x.dim()}"
    return None


@lowering(aten.gather.default, dtypes=ANY, check=_check_gather)
def lower_gather(ctx, node):
    x, dim, index = node.args[:3]
    if not ctx.shape(x):  # 0-d input and index: GatherElements needs rank >= 1
        picked = ctx.op("GatherElements", reshape(ctx, ctx.input(x), [1]), reshape(ctx, _no_wrap(ctx, index), [1]),
                        axis=0)
        return reshape(ctx, picked, [])
    axis = dims(ctx.arg(dim), len(ctx.shape(x)))[0]
    return ctx.op("GatherElements", ctx.input(x), _no_wrap(ctx, index), axis=axis)


def _index_positions(node) -> list[int]:
    return [i for i, idx in enumerate(node.args[1]) if idx is not None]


def _check_index(node):
    # x[..., idx, ...] with one integer index tensor is a Gather on that axis; several index tensors (broadcast to
    # one static shape, as in reads x[n, c, iy, ix] through coordinate maps, or upsampling's x[:, :, rows, cols])
    # are one GatherND over the indexed dims. Boolean masks (data-dependent sizes) are not lowered.
    indices = node.args[1]
    for idx in indices:
        if idx is not None and idx.meta["val"].dtype not in (torch.int64, torch.int32):
            return f"{idx.meta['val'].dtype} index (a mask: data-dependent size)"
    positions = _index_positions(node)
    if len(positions) == 1:
        return None
    shapes = [indices[i].meta["val"].shape for i in positions]
    if not all(isinstance(s, int) for shape in shapes for s in shape):
        return "several index tensors with symbolic shapes"
    return None


# _unsafe_index is index without the bounds check (decompositions of upsampling write it); ONNX's gathers take
# the same in-range indices.
@lowering(aten.index.Tensor, aten._unsafe_index.Tensor, dtypes=ANY, check=_check_index)
def lower_index(ctx, node):
    x, indices = node.args[:2]
    positions = _index_positions(node)
    if len(positions) == 1:
        return ctx.op("Gather", ctx.input(x), ctx.input(indices[positions[0]], torch.int64), axis=positions[0])
    return _gather_nd(ctx, x, indices, positions)


def _gather_nd(ctx, x, indices, positions: list[int]) -> str:
    """One GatherND over the indexed dims, moved to the front. ATen puts the broadcast index dims where the
    indexed dims were when those are adjacent, and in front when a sliced dim separates them."""
    rest = [d for d in range(len(ctx.shape(x))) if d not in positions]
    data = ctx.input(x)
    if positions != list(range(len(positions))):
        data = ctx.op("Transpose", data, perm=positions + rest)
    shape = list(torch.broadcast_shapes(*[ctx.shape(indices[i]) for i in positions]))
    stacked = ctx.op("Concat", *[ctx.op("Unsqueeze", ctx.op("Expand", ctx.input(indices[i], torch.int64),
                                                            ctx.ints(shape)), ctx.ints([-1]))
                                 for i in positions], axis=-1)
    out = ctx.op("GatherND", data, stacked)
    first, b = positions[0], len(shape)
    if first == 0 or positions != list(range(first, first + len(positions))):
        return out
    return ctx.op("Transpose", out, perm=[*range(b, b + first), *range(b), *range(b + first, b + len(rest))])


@lowering(aten.topk.default, dtypes=NUMERIC)
def lower_topk(ctx, node):
    args = list(node.args) + [None] * (5 - len(node.args))
    x, k, dim, largest, _sorted = args[:5]
    return _top_k(ctx, x, int(ctx.arg(k)), -1 if dim is None else ctx.arg(dim), True if largest is None else largest)


# A sort is a TopK of every element. ONNX's TopK puts equal elements in index order, which is a stable sort's
# order (and what ATen's sorts give).
@lowering(aten.sort.default, aten.sort.stable, dtypes=NUMERIC)
def lower_sort(ctx, node):
    x = node.args[0]
    dim = node.kwargs.get("dim", node.args[1] if len(node.args) > 1 and node.target is aten.sort.default else -1)
    descending = node.kwargs.get("descending", node.args[2] if len(node.args) > 2 else False)
    shape = ctx.shape(x)
    return _top_k(ctx, x, shape[dims(dim, len(shape))[0]] if shape else 1, dim, descending)


# The ranking key of a float TopK: +-inf and NaN as finite numbers just below the key type's largest, in ATen's
# order (-inf < numbers < +inf < NaN). ONNX Runtime's CUDA TopK ranks NaN below every number, and when k is the
# whole row it pads the row to a power of two with the type's largest number (lowest, largest first), which a
# row's own infinities lost to: indices past the row's end (H100, onnxruntime-gpu 1.31.1, float16, float32 and
# float64 alike; scripts/topk_cuda_probe.py). Keys below the padding keep every real element ahead of it.
# float16/bfloat16 rank as float32 (exact, and far from its largest); float32 and float64 keep their type, so
# their +inf and NaN tie with numbers within two steps of the largest, which no model holds. (A float64 key for
# float32 kept the exact order but made the CUDA TopK 1.4-1.7x slower, benchmarks/results/topk_key.md, and
# TensorRT has no float64.)
def _below_max(dtype, steps: int) -> float:
    x = np.finfo(dtype).max
    for _ in range(steps):
        x = np.nextafter(x, dtype(0))
    return float(x)


_KEY_TYPES = {torch.float16: torch.float32, torch.bfloat16: torch.float32, torch.float32: torch.float32,
              torch.float64: torch.float64}
_KEYS = {t: (_below_max(np_t, 2), _below_max(np_t, 1))  # key type -> (+inf's key, NaN's key)
         for t, np_t in ((torch.float32, np.float32), (torch.float64, np.float64))}


def _finite_key(ctx, name: str, dtype: torch.dtype) -> str:
    key_dtype = _KEY_TYPES[dtype]
    inf_key, nan_key = _KEYS[key_dtype]
    key = ctx.cast(name, key_dtype) if key_dtype != dtype else name
    nan = ctx.op("IsNaN", key)  # before the Clip, whose NaN output is the kernel's choice
    key = ctx.op("Clip", key, ctx.const(-inf_key, key_dtype), ctx.const(inf_key, key_dtype))  # +-inf to +-inf_key
    return ctx.op("Where", nan, ctx.const(nan_key, key_dtype), key)


def _top_k(ctx, x, k: int, dim: int, largest: bool):
    rank = len(ctx.shape(x))
    name = ctx.input(x) if rank else reshape(ctx, ctx.input(x), [1])  # TopK needs rank >= 1
    axis = dims(dim, max(rank, 1))[0]
    if not ctx.dtype(x).is_floating_point:
        values, indices = ctx.op("TopK", name, ctx.ints([k]), axis=axis, largest=int(bool(largest)), sorted=1,
                                 outputs=2)
    else:
        # Ranked by a finite key (_finite_key), the values read back from the input at the chosen indices.
        key = _finite_key(ctx, name, ctx.dtype(x))
        indices = ctx.op("TopK", key, ctx.ints([k]), axis=axis, largest=int(bool(largest)), sorted=1, outputs=2)[1]
        values = ctx.op("GatherElements", name, indices, axis=axis)
    if not rank:
        values, indices = reshape(ctx, values, []), reshape(ctx, indices, [])
    return (values, indices)
