"""grid_sample: 4-D as one ONNX GridSample, which was defined after PyTorch's (same modes, padding and
align_corners conventions); 5-D (volumes), which GridSample takes only from opset 20, written out as ATen's
kernel computes it: unnormalised coordinates, then the eight corners (trilinear) or the nearest voxel read from
the flattened volume by one GatherElements each. Having a lowering keeps aten.grid_sampler_2d out of the
capture's decomposition table; decomposed, each call became four reads x[n, c, iy, ix] through output-sized
index tensors, which ONNX Runtime ran 2.4x slower than eager's kernel on RAFT (192 calls)."""
from __future__ import annotations

import numpy as np
import torch

from ..registry import lowering

aten = torch.ops.aten

_MODES = ("bilinear", "nearest", "bicubic")  # ATen's interpolation_mode 0, 1, 2
_PADDING = ("zeros", "border", "reflection")  # ATen's padding_mode 0, 1, 2


def _check_grid_sampler(node):
    x = node.args[0].meta.get("val")
    if x is None or x.dim() != 4:
        return "only 4-D inputs"
    mode, padding = node.args[2], node.args[3]
    if mode not in range(len(_MODES)) or padding not in range(len(_PADDING)):
        return f"interpolation mode {mode} / padding mode {padding} unknown to ONNX GridSample"
    return None


# float16: computed in float32 between casts, as eager's kernels do (opmath); the providers' kernels are float.
@lowering(aten.grid_sampler_2d.default, dtypes={torch.float32, torch.float16}, check=_check_grid_sampler)
def lower_grid_sampler_2d(ctx, node):
    x, grid, mode, padding, align_corners = node.args
    out = ctx.op("GridSample", ctx.input(x, torch.float32), ctx.input(grid, torch.float32), mode=_MODES[mode],
                 padding_mode=_PADDING[padding], align_corners=int(bool(align_corners)))
    return ctx.cast(out, torch.float16) if ctx.dtype(x) == torch.float16 else out


def _check_grid_sampler_3d(node):
    mode, padding = node.args[2], node.args[3]
    if mode not in (0, 1) or padding not in (0, 1):
        named = (_MODES[mode] if mode in (0, 1, 2) else mode, _PADDING[padding] if padding in (0, 1, 2) else padding)
        return ("5-D grid_sample with interpolation %s / padding %s (written out: bilinear, nearest; zeros, "
                "border)" % named)
    return None


@lowering(aten.grid_sampler_3d.default, dtypes={torch.float32, torch.float16}, check=_check_grid_sampler_3d)
def lower_grid_sampler_3d(ctx, node):
    x, grid, mode, padding, align_corners = node.args
    _, c, *sizes = ctx.shape(x)  # sizes: (D, H, W); the grid's last axis is (x, y, z): W, H, D
    # (no batch size is written: 0 copies it, so every batch size lowers to the same graph)
    out_sizes = ctx.shape(node)[2:]
    f32, i64 = torch.float32, torch.int64
    volume = ctx.op("Reshape", ctx.input(x, f32), ctx.ints([0, c, -1]))
    coords = ctx.op("Split", ctx.op("Reshape", ctx.input(grid, f32), ctx.ints([0, 1, -1, 3])), axis=3, outputs=3)
    points = []  # per axis (D, H, W): unnormalised coordinates, (N, 1, L)
    for size, g in zip(sizes, reversed(coords)):
        g = ctx.op("Squeeze", g, ctx.ints([3]))
        if align_corners:
            p = ctx.op("Mul", ctx.op("Add", g, ctx.const(1.0, f32)), ctx.const((size - 1) / 2, f32))
        else:
            scaled = ctx.op("Mul", ctx.op("Add", g, ctx.const(1.0, f32)), ctx.const(float(size), f32))
            p = ctx.op("Div", ctx.op("Sub", scaled, ctx.const(1.0, f32)), ctx.const(2.0, f32))
        if padding == 1:  # border: clip into the volume
            p = ctx.op("Clip", p, ctx.const(0.0, f32), ctx.const(float(size - 1), f32))
        points.append(p)
    strides = [sizes[1] * sizes[2], sizes[2], 1]
    if mode == 1:  # nearest: ATen rounds half to even, as ONNX Round does
        taps = [[(ctx.op("Round", p), None)] for p in points]
    else:
        taps = []
        for p in points:
            low = ctx.op("Floor", p)
            high_weight = ctx.op("Sub", p, low)
            taps.append([(low, ctx.op("Sub", ctx.const(1.0, f32), high_weight)),
                         (ctx.op("Add", low, ctx.const(1.0, f32)), high_weight)])
    # Per axis and tap, once: whether it lies inside the volume, and its offset in the flattened volume.
    taps = [[(ctx.op("And", ctx.op("GreaterOrEqual", at, ctx.const(0.0, f32)),
                     ctx.op("LessOrEqual", at, ctx.const(float(sizes[axis] - 1), f32))),
              ctx.op("Mul", ctx.cast(at, i64), ctx.const(strides[axis], i64)), w) for at, w in axis_taps]
            for axis, axis_taps in enumerate(taps)]
    out = None
    for corner in np.ndindex(*[len(t) for t in taps]):
        inside, index, weight = taps[0][corner[0]]
        for axis in (1, 2):
            ok, offset, w = taps[axis][corner[axis]]
            inside, index = ctx.op("And", inside, ok), ctx.op("Add", index, offset)
            weight = w if weight is None else (weight if w is None else ctx.op("Mul", weight, w))
        index = ctx.op("Where", inside, index, ctx.const(0, i64))  # an out-of-volume corner reads voxel 0 ...
        read = ctx.op("GatherElements", volume, ctx.op("Expand", index, ctx.ints([1, c, 1])), axis=2)
        term = read if weight is None else ctx.op("Mul", read, weight)
        term = ctx.op("Where", inside, term, ctx.const(0.0, f32))  # ... and counts 0 (even if that voxel is inf)
        out = term if out is None else ctx.op("Add", out, term)
    out = ctx.op("Reshape", out, ctx.ints([0, c, *out_sizes]))
    return ctx.cast(out, torch.float16) if ctx.dtype(x) == torch.float16 else out
