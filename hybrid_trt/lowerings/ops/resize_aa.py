"""Antialiased bilinear and bicubic resizes (``F.interpolate(..., antialias=True)``, torchvision's ``Resize`` in a
model's preprocessing) as two banded weighted sums, one per axis; ONNX Resize takes ``antialias`` only from
opset 18.

ATen's antialiased resize is separable: each output row is a weighted sum of a band of input rows (the filter
widened by the downscale factor), then likewise along columns. The weights are ATen's own: the op is run once
at lowering time on a one-hot basis along each axis (an identity image), which gives every output position's
weights exactly as the kernel computes them, align_corners and scale factors included. Each axis is then a
Gather of its band (out x band width taps) and a weighted ReduceSum, the cost of the kernel itself, not of a
dense (out x in) matrix product.
"""
from __future__ import annotations

import numpy as np
import torch

from ..registry import FLOAT, lowering

aten = torch.ops.aten

_VEC = (aten._upsample_bilinear2d_aa.vec, aten._upsample_bicubic2d_aa.vec)


def _check_aa(node):
    x, out = node.args[0].meta.get("val"), node.meta.get("val")
    if not isinstance(x, torch.Tensor) or x.dim() != 4:
        return "only 4-D inputs"
    # ATen's CPU kernel samples the first rows only when the output's width is 1 (and likewise for columns when
    # its height is 1), seen on torch 2.14; not reproduced here, so those stay with ATen's own kernel.
    if any(isinstance(s, int) and s == 1 for s in out.shape[-2:]):
        return "an output height or width of 1 (ATen's kernel takes another path there)"
    return None


def _axis_weights(node, axis: int, size_in: int, size_out: int) -> np.ndarray:
    """ATen's weights along ``axis`` (2: height, 3: width) as an (out, in) matrix: the op on an identity image
    whose other axis keeps its size 2 (size 1 there takes another path in ATen's CPU kernel, whose weights along
    this axis differ: seen on torch 2.14)."""
    shape, out_size = [size_in, 1, 2, 2], [2, 2]
    shape[axis] = size_in
    out_size[axis - 2] = size_out
    basis = torch.eye(size_in, dtype=torch.float64).reshape([size_in, 1] + [size_in if d == axis else 1
                                                                           for d in (2, 3)]).expand(shape)
    args = list(node.args[2:])
    if node.target in _VEC:  # (output_size, align_corners, scale_factors): the given factor along this axis
        factors = args[1]
        scale = [1.0, 1.0]  # (the other axis keeps its size: factor 1)
        if factors is not None:
            scale[axis - 2] = factors[axis - 2]
        out = node.target(basis, None if factors is not None else out_size, args[0], scale if factors else None)
    else:  # (output_size, align_corners, scales_h, scales_w)
        scales = (args[1:] + [None, None])[:2]
        scales = [scales[0], None] if axis == 2 else [None, scales[1]]
        out = node.target(basis, out_size, args[0], *scales)
    out = out[:, 0, :, :1] if axis == 2 else out[:, 0, :1, :]  # both lines along the other axis are equal
    return out.reshape(size_in, size_out).T.numpy()


def _banded_sum(ctx, x: str, weights: np.ndarray, axis: int) -> str:
    """sum_k weights[o, band_o + k] * x[..., band_o + k, ...] along ``axis``: each output's nonzero band."""
    nonzero = weights != 0
    first = np.where(nonzero.any(1), nonzero.argmax(1), 0)
    last = np.where(nonzero.any(1), weights.shape[1] - 1 - nonzero[:, ::-1].argmax(1), 0)
    width = int((last - first).max()) + 1
    taps = np.minimum(first[:, None] + np.arange(width), weights.shape[1] - 1)
    tap_weights = np.where(first[:, None] + np.arange(width) <= last[:, None],
                           np.take_along_axis(weights, taps, 1), 0.0)
    gathered = ctx.op("Gather", x, ctx.tensor_const(torch.from_numpy(taps.astype(np.int64))), axis=axis)
    # (..., out, band, ...) times the weights, broadcast from (out, band[, 1])
    shape = [weights.shape[0], width] + [1] * (3 - axis)
    tap_weights = torch.from_numpy(tap_weights.astype(np.float32).reshape(shape))
    return ctx.op("ReduceSum", ctx.op("Mul", gathered, ctx.tensor_const(tap_weights)), ctx.ints([axis + 1]),
                  keepdims=0)


# float16: computed in float32 between casts, as ATen's kernels accumulate in float.
@lowering(aten._upsample_bilinear2d_aa.default, aten._upsample_bilinear2d_aa.vec, aten._upsample_bicubic2d_aa.default,
          aten._upsample_bicubic2d_aa.vec, dtypes=FLOAT - {torch.float64}, check=_check_aa)
def lower_upsample_aa(ctx, node):
    x = node.args[0]
    (_, _, h, w), (_, _, oh, ow) = ctx.shape(x), ctx.shape(node)
    out = ctx.input(x, torch.float32)
    for axis, size_in, size_out in ((3, w, ow), (2, h, oh)):  # along width, then height, as ATen's CPU kernel
        weights = _axis_weights(node, axis, size_in, size_out)
        if weights.shape != (size_in, size_in) or not np.array_equal(weights, np.eye(size_in)):  # else unchanged
            out = _banded_sum(ctx, out, weights, axis)
    return ctx.cast(out, ctx.dtype(node)) if ctx.dtype(node) != torch.float32 else out
