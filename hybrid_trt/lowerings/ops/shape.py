"""Data movement: view family (as Reshape to the output shape, shape-generic where traced symbolic), permute,
expand, slice/select and their scatters, copy, cat, split/unbind, pad, repeat."""
from __future__ import annotations

from typing import Optional

import torch
import torch.fx as fx
from torch.fx.experimental.symbolic_shapes import statically_known_true

from ..registry import ANY, lowering
from ._dims import dim_of, shape_value, slice_bound, traced, traced_shape
from ._util import dims, generic_expand_target, generic_reshape_target, reshape

aten = torch.ops.aten

INT64_MAX = 2**63 - 1


@lowering(aten.view.default, aten._unsafe_view.default, aten.reshape.default, aten.squeeze.dim,
          aten.squeeze.dims, aten.squeeze.default, aten.unsqueeze.default, aten.flatten.using_ints,
          dtypes=ANY)
def lower_reshape(ctx, node):
    # Every member of the view family is one Reshape to the output shape: concrete, or, where the partition was
    # traced with symbolic sizes, the same target at every size of its range (_util.generic_reshape_target).
    generic = generic_reshape_target(ctx, node)
    if generic is not None:
        return ctx.op("Reshape", ctx.input(node.args[0]), ctx.ints(generic))
    return reshape(ctx, ctx.input(node.args[0]), ctx.shape(node))


@lowering(aten.permute.default, dtypes=ANY)
def lower_permute(ctx, node):
    rank = len(ctx.shape(node.args[0]))
    if rank == 0:  # a 0-d permute is the identity; ONNX cannot type an empty ``perm``
        return ctx.op("Identity", ctx.input(node.args[0]))
    return ctx.op("Transpose", ctx.input(node.args[0]), perm=dims(ctx.arg(node.args[1]), rank))


@lowering(aten.t.default, aten.transpose.int, dtypes=ANY)
def lower_transpose(ctx, node):
    rank = len(ctx.shape(node.args[0]))
    if rank == 0:
        return ctx.op("Identity", ctx.input(node.args[0]))
    perm = list(range(rank))
    if rank >= 2:
        a, b = (dims(ctx.arg(d), rank)[0] for d in node.args[1:3]) if node.target is aten.transpose.int else (0, 1)
        perm[a], perm[b] = perm[b], perm[a]
    return ctx.op("Transpose", ctx.input(node.args[0]), perm=perm)


@lowering(aten.expand.default, dtypes=ANY)
def lower_expand(ctx, node):
    target = generic_expand_target(ctx, node)
    if target is None:  # a size-1 dim broadcast to a symbolic size (ViT's class token to the batch): read it
        value = shape_value(ctx, node)  # from a tensor that has it, or the concrete shape where none has
        if value is not None:
            return ctx.op("Expand", ctx.input(node.args[0]), value)
    return ctx.op("Expand", ctx.input(node.args[0]), ctx.ints(ctx.shape(node) if target is None else target))


@lowering(aten.repeat.default, dtypes=ANY)
def lower_repeat(ctx, node):
    x = node.args[0]
    repeats = [int(r) for r in ctx.arg(node.args[1])]
    shape = ctx.shape(x)
    name = ctx.input(x)
    if len(repeats) > len(shape):  # repeat() prepends dims of size 1
        name = reshape(ctx, name, [1] * (len(repeats) - len(shape)) + shape)
    return ctx.op("Tile", name, ctx.ints(repeats))


def _check_as_strided(node):
    """``as_strided`` reads storage, which a delegate does not have: only the restrides that read a row-major input
    in its own order are taken (the same elements as a Reshape, or a prefix of them). ConvNeXt's classifier
    restrides the pooled (1, C, 1, 1) tensor's size-1 dims this way, which split its graph in two partitions."""
    x, out = node.args[0].meta.get("val"), node.meta.get("val")
    offset = node.args[3] if len(node.args) > 3 else node.kwargs.get("storage_offset")
    if not isinstance(x, torch.Tensor) or not isinstance(out, torch.Tensor):
        return "no traced value"
    if isinstance(offset, fx.Node):
        offset = offset.meta.get("val")
    # With symbolic sizes (the batch of EdgeNeXt's pooled head, restrided like ConvNeXt's) each condition must
    # hold for every size the trace allows; one it cannot prove declines, and nothing here adds a guard.
    if not _row_major(x.shape, x.stride()):
        return "reads the storage of a non-contiguous tensor"
    if offset is not None and not statically_known_true(offset == x.storage_offset()):
        return "storage offset other than its input's"
    if not _row_major(out.shape, out.stride()):  # the traced output has the size and stride arguments
        return "strides that do not read the input in row-major order"
    return None if statically_known_true(out.numel() <= x.numel()) else "reads past its input's elements"


def _row_major(sizes, strides) -> bool:
    """Whether these are provably a row-major tensor's strides (a size-1 dim's stride is free)."""
    expected = 1
    for n, st in zip(reversed(sizes), reversed(strides)):
        if not statically_known_true(n == 1) and not statically_known_true(st == expected):
            return False
        expected = expected * n
    return True


@lowering(aten.as_strided.default, dtypes=ANY, check=_check_as_strided)
def lower_as_strided(ctx, node):
    x = node.args[0]
    shape, numel = ctx.shape(node), ctx.val(node).numel()
    name = ctx.input(x)
    if numel != ctx.val(x).numel():  # a row-major prefix of the input
        flat = reshape(ctx, name, [ctx.val(x).numel()])
        name = ctx.op("Slice", flat, ctx.ints([0]), ctx.ints([numel]), ctx.ints([0]))
    else:  # all of it: a Reshape, generic over a dynamic batch as the view family's (ConvNeXt's pooled head)
        generic = generic_reshape_target(ctx, node)
        if generic is not None:
            return ctx.op("Reshape", name, ctx.ints(generic))
    return reshape(ctx, name, shape)


def _check_slice(node):
    step = node.args[4] if len(node.args) > 4 else 1
    return None if isinstance(step, int) and step > 0 else "non-positive step"


@lowering(aten.slice.Tensor, dtypes=ANY, check=_check_slice)
def lower_slice(ctx, node):
    args = list(node.args) + [None] * (5 - len(node.args))
    x, dim, start, end, step = args[:5]
    shape = ctx.shape(x)
    dim = dims(ctx.arg(dim if dim is not None else 0), len(shape))[0]
    step = 1 if step is None else int(ctx.arg(step))
    if step > 1 and dim == len(shape) - 1:
        lanes = _strided_innermost(ctx, x, start, end, step)
        if lanes is not None:
            return lanes
    starts, ends = _slice_bound(ctx, x, dim, start, 0), _slice_bound(ctx, x, dim, end, INT64_MAX)
    return ctx.op("Slice", ctx.input(x), starts, ends, ctx.ints([dim]), ctx.ints([step]))


def _strided_innermost(ctx, x, start, end, step: int):
    """``x[..., start:end:step]`` as a Reshape of the innermost dim to ``[D / step, step]`` and a Split of its
    ``step`` lanes (then a step-1 Slice where the range is not all of the lane). ONNX Runtime's CPU Slice copies a
    strided innermost dim element by element: RoPE's ``x[..., ::2]`` on 1x3x256x64 (EVA02) took 36 us against
    13 us for the Split of both lanes, and 1x32x160x160 180 against 60 us (run time less an Identity's). None
    (a plain Slice) unless the innermost size is static and a multiple of ``step`` and the bounds are numbers."""
    sizes = traced_shape(x)
    if not sizes or not isinstance(sizes[-1], int) or sizes[-1] % step:
        return None
    if not all(b is None or isinstance(b, int) for b in (start, end)):
        return None
    n = sizes[-1]
    picked = range(n)[slice(start, end, step)]  # ATen clamps the bounds as Python slicing does
    if not picked:
        return None
    lane, first = picked[0] % step, picked[0] // step
    keep = [0] * (len(sizes) - 1)  # Reshape's 0: the input's size, so leading symbolic sizes stay generic
    split = ctx.op("Split", ctx.op("Reshape", ctx.input(x), ctx.ints(keep + [n // step, step])),
                   ctx.ints([1] * step), axis=len(sizes), outputs=step)
    out = ctx.op("Reshape", split[lane], ctx.ints(keep + [n // step]))
    if len(picked) == n // step:
        return out
    return ctx.op("Slice", out, ctx.ints([first]), ctx.ints([first + len(picked)]), ctx.ints([len(sizes) - 1]))


def _slice_bound(ctx, x, dim, bound, default):
    """A Slice start/end as a value: a constant, shape-generic where the bound is a traced size expression (to
    or from the end of the sliced dim, else the size of another tensor's dim), or this shape's number."""
    if bound is None:
        return ctx.ints([default])
    generic = slice_bound(ctx, x, dim, bound)
    if generic is not None:
        return ctx.ints([generic])
    e = traced(bound)
    if isinstance(bound, fx.Node) and e is not None and not isinstance(e, int):
        # Another size (a crop to a skip connection's size, say): read it from a tensor that has it. A traced
        # size of a tensor is never negative, so ATen and ONNX read it alike.
        source = dim_of(ctx, e, int(ctx.arg(bound)))
        if source is not None:
            return source
    return ctx.ints([int(ctx.arg(bound))])


@lowering(aten.flip.default, dtypes=ANY)
def lower_flip(ctx, node):
    x, flipped = node.args
    axes = dims(ctx.arg(flipped), len(ctx.shape(x))) if ctx.shape(x) else []
    if not axes:
        return ctx.op("Identity", ctx.input(x))
    # Each flipped dim read backwards: from its last element to past its first (INT64_MIN reaches index -1).
    return ctx.op("Slice", ctx.input(x), ctx.ints([-1] * len(axes)), ctx.ints([-INT64_MAX - 1] * len(axes)),
                  ctx.ints(axes), ctx.ints([-1] * len(axes)))


def _check_unfold(node):
    return "unfold of a 0-d tensor" if node.args[0].meta["val"].dim() == 0 else None


@lowering(aten.unfold.default, dtypes=ANY, check=_check_unfold)
def lower_unfold(ctx, node):
    # Every window at once: one Gather of the element positions ([windows, size]) along the dim, then the window's
    # axis moved last, where Tensor.unfold puts it (HaloNet's blocked attention unfolds its keys this way).
    x, dim, size, step = node.args
    shape = ctx.shape(x)
    d = dims(ctx.arg(dim), len(shape))[0]
    windows = (shape[d] - size) // step + 1
    positions = torch.arange(windows)[:, None] * step + torch.arange(size)[None, :]
    out = ctx.op("Gather", ctx.input(x), ctx.tensor_const(positions), axis=d)
    perm = [a for a in range(len(shape) + 1) if a != d + 1] + [d + 1]
    return out if d == len(shape) - 1 else ctx.op("Transpose", out, perm=perm)


@lowering(aten.select.int, dtypes=ANY)
def lower_select(ctx, node):
    x, dim, index = node.args
    shape = ctx.shape(x)
    dim = dims(ctx.arg(dim), len(shape))[0]
    index = int(ctx.arg(index))
    traced_dims = traced_shape(x)
    if index < 0 and traced_dims is not None and not isinstance(traced_dims[dim], int):
        # Counted from the end of a dim that varies over the range: a Slice with a negative start says so
        # (index % size would bake this shape's size into the graph).
        end = INT64_MAX if index == -1 else index + 1
        picked = ctx.op("Slice", ctx.input(x), ctx.ints([index]), ctx.ints([end]), ctx.ints([dim]))
        return ctx.op("Squeeze", picked, ctx.ints([dim]))
    permuted = _permuted_source(ctx, x)
    if permuted is not None:  # a select of a permute: a Gather of its input, then the permute of the rest
        source, perm = permuted
        picked = ctx.op("Gather", ctx.input(source), ctx.const(index % shape[dim], torch.int64), axis=perm[dim])
        return _transpose_without(ctx, picked, perm, dim)
    return ctx.op("Gather", ctx.input(x), ctx.const(index % shape[dim], torch.int64), axis=dim)


def _permuted_source(ctx, x) -> Optional[tuple]:
    """(the permute's input, its perm) when ``x`` is a permute this partition lowered, else None.

    Why: an attention's ``qkv.reshape(B, N, 3, heads, d).permute(2, 0, 3, 1, 4).unbind(0)`` lowered as it reads is
    a Transpose then a Split; ONNX Runtime's transpose optimizer moves the Transpose below the Split, keeping the
    split axis as a size-1 dim in each of the three, and its CPU Transpose does not drop such dims: XCiT's
    [1, 784, 1, 4, 48] to [1, 1, 4, 48, 784] took 398 us alone (445 us in the model) against 33 us for the same
    move without the size-1 dim placed first (36 of them per call, 16 ms of its 67). Splitting the permute's input along the axis the perm
    picks, and permuting the rest, is the same data in the order ONNX Runtime moves fastest."""
    if not (isinstance(x, fx.Node) and x.target is aten.permute.default and ctx.has(x.args[0])):
        return None
    return x.args[0], dims(ctx.arg(x.args[1]), len(ctx.shape(x)))


def _transpose_without(ctx, name: str, perm: list, axis: int) -> str:
    """The Transpose ``perm`` of a tensor from which the dim ``perm[axis]`` was taken out (no Transpose where the
    rest keeps its order)."""
    gone = perm[axis]
    rest = [p - (p > gone) for p in perm if p != gone]
    return name if rest == sorted(rest) else ctx.op("Transpose", name, perm=rest)


def _check_scatter_into(node):
    # Written as a Concat of the input's pieces around ``src`` along ``dim`` (a strided slice_scatter, whose
    # pieces interleave, as a ScatterElements at constant positions along ``dim``): that dim's size must be known.
    x = node.args[0].meta.get("val")
    dim = node.args[2] if len(node.args) > 2 else node.kwargs.get("dim", 0)
    if not isinstance(x, torch.Tensor) or x.dim() == 0:
        return "0-d input"
    if not isinstance(x.shape[dims(dim, x.dim())[0]], int):
        return "scattered dim has a symbolic size"
    if node.target is aten.select_scatter.default and not isinstance(node.args[3], int):
        return "symbolic index"
    if node.target is aten.slice_scatter.default:
        bounds = [node.args[i] if len(node.args) > i else node.kwargs.get(k, d)
                  for i, k, d in ((3, "start", None), (4, "end", None), (5, "step", 1))]
        if any(b is not None and not isinstance(b, int) for b in bounds):
            return "symbolic slice bounds"
    return None


@lowering(aten.select_scatter.default, aten.slice_scatter.default, dtypes=ANY, check=_check_scatter_into)
def lower_scatter_into(ctx, node):
    x, src = node.args[:2]
    shape = ctx.shape(x)
    dim = dims(ctx.arg(node.args[2] if len(node.args) > 2 else node.kwargs.get("dim", 0)), len(shape))[0]
    if node.target is aten.select_scatter.default:
        start = int(ctx.arg(node.args[3])) % shape[dim]
        end, piece = start + 1, ctx.op("Unsqueeze", ctx.input(src), ctx.ints([dim]))
    else:
        bounds = [node.args[i] if len(node.args) > i else node.kwargs.get(k, d)
                  for i, k, d in ((3, "start", None), (4, "end", None), (5, "step", 1))]
        picked = range(shape[dim])[slice(*bounds)]  # ATen clamps the bounds as Python slicing does
        if picked.step != 1:
            return _scatter_strided(ctx, x, src, dim, picked, len(shape))
        start = picked.start
        end, piece = start + ctx.shape(src)[dim], ctx.input(src)
    parts = [ctx.op("Slice", ctx.input(x), ctx.ints([0]), ctx.ints([start]), ctx.ints([dim]))] if start else []
    parts.append(piece)
    if end < shape[dim]:
        parts.append(ctx.op("Slice", ctx.input(x), ctx.ints([end]), ctx.ints([shape[dim]]), ctx.ints([dim])))
    return ctx.op("Concat", *parts, axis=dim) if len(parts) > 1 else ctx.op("Identity", piece)


def _scatter_strided(ctx, x, src, dim: int, picked: range, rank: int):
    # src's element j along dim lands at picked[j]: the positions as a constant along dim, broadcast over src.
    positions = torch.tensor(list(picked), dtype=torch.int64).reshape([-1 if d == dim else 1 for d in range(rank)])
    indices = ctx.op("Expand", ctx.const(positions, torch.int64), ctx.op("Shape", ctx.input(src)))
    return ctx.op("ScatterElements", ctx.input(x), indices, ctx.input(src), axis=dim)


def _check_copy(node):
    dst, src = (a.meta.get("val") if isinstance(a, fx.Node) else None for a in node.args[:2])
    if not isinstance(dst, torch.Tensor) or not isinstance(src, torch.Tensor):
        return "no traced values"
    return None if dst.device == src.device else "copy between devices"


@lowering(aten.copy.default, dtypes=ANY, check=_check_copy)
def lower_copy(ctx, node):
    # The functional copy: ``src`` in ``self``'s dtype, broadcast to ``self``'s shape (self's values unused).
    dst, src = node.args[:2]
    name = ctx.input(src)
    if ctx.dtype(src) != ctx.dtype(dst):
        name = ctx.cast(name, ctx.dtype(dst))
    if ctx.shape(src) == ctx.shape(dst):
        return ctx.op("Identity", name)
    return ctx.op("Expand", name, ctx.op("Shape", ctx.input(dst)))


@lowering(aten.cat.default, dtypes=ANY)
def lower_cat(ctx, node):
    dtype = ctx.dtype(node)
    rank = len(ctx.shape(node))
    dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", 0)
    # ATen's cat skips legacy empty 1-D tensors of shape (0,); ONNX would reject them.
    parts = [t for t in node.args[0] if ctx.shape(t) != [0] or rank == 1]
    return ctx.op("Concat", *(ctx.input(t, dtype) for t in parts), axis=dims(ctx.arg(dim), rank)[0])


def _split(ctx, node, sizes, dim):
    x = node.args[0]
    rank = len(ctx.shape(x))
    axis = dims(ctx.arg(dim), rank)[0]
    outs = ctx.op("Split", ctx.input(x), ctx.ints(sizes), axis=axis, outputs=len(sizes))
    return outs if isinstance(outs, tuple) else (outs,)


@lowering(aten.split.Tensor, aten.split_with_sizes.default, dtypes=ANY)
def lower_split(ctx, node):
    dim = node.args[2] if len(node.args) > 2 else node.kwargs.get("dim", 0)
    shape = ctx.shape(node.args[0])
    axis = dims(ctx.arg(dim), len(shape))[0]
    sizes = [int(v.shape[axis]) for v in ctx.val(node)]
    return _split(ctx, node, sizes, axis)


@lowering(aten.unbind.int, dtypes=ANY)
def lower_unbind(ctx, node):
    dim = node.args[1] if len(node.args) > 1 else 0
    shape = ctx.shape(node.args[0])
    axis = dims(ctx.arg(dim), len(shape))[0]
    permuted = _permuted_source(ctx, node.args[0])
    if permuted is not None:  # an unbind of a permute: a Split of its input, then the permute of each part
        source, perm = permuted
        parts = ctx.op("Split", ctx.input(source), ctx.ints([1] * shape[axis]), axis=perm[axis],
                       outputs=shape[axis])
        parts = parts if isinstance(parts, tuple) else (parts,)
        return tuple(_transpose_without(ctx, ctx.op("Squeeze", p, ctx.ints([perm[axis]])), perm, axis)
                     for p in parts)
    parts = _split(ctx, node, [1] * shape[axis], axis)
    return tuple(ctx.op("Squeeze", p, ctx.ints([axis])) for p in parts)


def _check_pad(node):
    if any(not isinstance(p, int) for p in node.args[1]):
        return "symbolic padding"
    return None


@lowering(aten.constant_pad_nd.default, dtypes=ANY, check=_check_pad)
def lower_constant_pad(ctx, node):
    """Negative amounts crop (F.pad's crop, F.fold's decomposition): a Slice of those, then a Pad of the rest."""
    x = node.args[0]
    pad = [int(p) for p in ctx.arg(node.args[1])]
    value = ctx.arg(node.args[2]) if len(node.args) > 2 else 0
    rank = len(ctx.shape(x))
    begins, ends = [0] * rank, [0] * rank
    # ATen lists (begin, end) pairs starting from the last dimension.
    for i in range(len(pad) // 2):
        begins[rank - 1 - i], ends[rank - 1 - i] = pad[2 * i], pad[2 * i + 1]
    out = ctx.input(x)
    cropped = [axis for axis in range(rank) if begins[axis] < 0 or ends[axis] < 0]
    if cropped:  # ends counted from the end of the axis, so no size is written
        out = ctx.op("Slice", out, ctx.ints([max(-begins[a], 0) for a in cropped]),
                     ctx.ints([ends[a] if ends[a] < 0 else INT64_MAX for a in cropped]), ctx.ints(cropped))
    if not any(p > 0 for p in begins + ends):
        return out if cropped else ctx.op("Identity", out)
    return ctx.op("Pad", out, ctx.ints([max(p, 0) for p in begins + ends]), ctx.const(value, ctx.dtype(x)),
                  mode="constant")
