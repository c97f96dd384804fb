"""torchvision's deformable convolution (DCNv1/v2: ``torchvision.ops.deform_conv2d``, the heads of CenterNet-,
FCOS- and YOLO-style detectors) as one GridSample and one MatMul; ONNX's DeformConv needs opset 19.

Each kernel tap samples the input at ``output position * stride - padding + tap * dilation + offset``, bilinearly,
reading zero outside the image, as torchvision's kernel does. All taps of all output positions are sampled by
one GridSample (taps stacked along the grid's height, offset groups along the batch), in pixel coordinates made
normalised for ``align_corners=1``; the mask multiplies the samples, and the weights contract channels and taps
in one (grouped) MatMul, which is torchvision's own im2col form.
"""
from __future__ import annotations

import numpy as np
import torch

from ..registry import lowering

_DEFORM_CONV2D = "torchvision.deform_conv2d.default"


def _check_deform_conv2d(node):
    x = node.args[0].meta.get("val")
    # (a symbolic size is at least 2: Dynamo specialises sizes 0 and 1)
    if isinstance(x, torch.Tensor) and any(isinstance(s, int) and s < 2 for s in x.shape[-2:]):
        return "an input height or width of 1 (GridSample's align_corners=1 coordinates need two pixels)"
    return None


# float16: computed in float32 between casts, as the grid_sample lowering is (the providers' kernels are float).
@lowering(_DEFORM_CONV2D, dtypes={torch.float32, torch.float16}, check=_check_deform_conv2d)
def lower_deform_conv2d(ctx, node):
    x, weight, offset, mask, bias, sh, sw, ph, pw, dh, dw, groups, offset_groups, use_mask = node.args
    # No size of the batch is written (0 copies it, -1 infers it): one graph for every batch size, so a batch
    # range gets one engine (engines/ranges.py).
    (_, c, h, w), (o, _, kh, kw), (ho, wo) = ctx.shape(x), ctx.shape(weight), ctx.shape(node)[-2:]
    taps, f32 = kh * kw, torch.float32
    # Sampling positions: the fixed grid of every tap at every output position, plus the learned offsets.
    base_y = (np.arange(ho) * sh - ph)[None, :, None] + (np.arange(kh) * dh).repeat(kw)[:, None, None]
    base_x = (np.arange(wo) * sw - pw)[None, None, :] + np.tile(np.arange(kw) * dw, kh)[:, None, None]
    dy, dx = ctx.op("Split", ctx.op("Reshape", ctx.input(offset, f32),
                                    ctx.ints([0, offset_groups, taps, 2, ho, wo])), axis=3, outputs=2)
    coords = []
    for delta, base, size in ((dx, base_x, w), (dy, base_y, h)):  # GridSample's grid is (x, y)
        pixels = ctx.op("Add", ctx.op("Squeeze", delta, ctx.ints([3])), ctx.const(base.astype(np.float32), f32))
        coords.append(ctx.op("Unsqueeze", ctx.op("Sub", ctx.op("Mul", pixels, ctx.const(2.0 / (size - 1), f32)),
                                                 ctx.const(1.0, f32)), ctx.ints([-1])))
    grid = ctx.op("Reshape", ctx.op("Concat", *coords, axis=-1), ctx.ints([-1, taps * ho, wo, 2]))
    images = ctx.op("Reshape", ctx.input(x, f32), ctx.ints([-1, c // offset_groups, h, w]))
    samples = ctx.op("GridSample", images, grid, mode="bilinear", padding_mode="zeros", align_corners=1)
    samples = ctx.op("Reshape", samples, ctx.ints([-1, offset_groups, c // offset_groups, taps, ho, wo]))
    if use_mask:
        samples = ctx.op("Mul", samples, ctx.op("Reshape", ctx.input(mask, f32),
                                                 ctx.ints([-1, offset_groups, 1, taps, ho, wo])))
    columns = ctx.op("Reshape", samples, ctx.ints([-1, groups, c // groups * taps, ho * wo]))
    kernel = ctx.op("Reshape", ctx.input(weight, f32), ctx.ints([groups, o // groups, c // groups * taps]))
    out = ctx.op("Reshape", ctx.op("MatMul", kernel, columns), ctx.ints([-1, o, ho, wo]))
    out = ctx.op("Add", out, ctx.op("Reshape", ctx.input(bias, f32), ctx.ints([o, 1, 1])))
    return ctx.cast(out, torch.float16) if ctx.dtype(x) == torch.float16 else out
