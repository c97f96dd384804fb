"""Nearest and bilinear upsampling as ONNX Resize, matching PyTorch's coordinate conventions."""
from __future__ import annotations

import torch

from ...capture import preserve  # noqa: F401  (defines hybrid_trt::interpolate)
from ..registry import FLOAT, lowering
from ._dims import integer_scales, shape_value

aten = torch.ops.aten


def _check_interpolate(node):
    return _check_4d(node)


@lowering(torch.ops.hybrid_trt.interpolate.default, dtypes=FLOAT, check=_check_interpolate)
def lower_interpolate(ctx, node):
    x, size, scale_factor, mode, align_corners = node.args
    factors = ctx.arg(scale_factor) if size is None else None
    if mode == "nearest":
        return ctx.op("Resize", ctx.input(x), *_scales_or_sizes(ctx, node, factors), mode="nearest",
                      coordinate_transformation_mode="asymmetric", nearest_mode="floor")
    return _bilinear(ctx, node, x, align_corners, factors)


def _check_4d(node):
    x = node.args[0].meta.get("val")
    return None if x is not None and x.dim() == 4 else "only 4-D inputs"


def _scales_or_sizes(ctx, node, scale_factors):
    """PyTorch uses the given scale factors (not out/in) to map coordinates, so pass those when it has them.
    Otherwise the output sizes; where they vary over a dynamic range (traced symbolic), in a form that holds at
    every size of it: scales when each output dim is an exact integer multiple of the input's (ONNX Runtime
    and TensorRT derive the same scale out/in from sizes, so the result is identical), else the sizes read
    from a tensor of the partition that has them (an FPN's upsample to the lateral feature's size)."""
    empty = ctx.const([], torch.float32)
    if scale_factors:
        return [empty, ctx.const([1.0, 1.0] + [float(s) for s in scale_factors], torch.float32)]
    scales = integer_scales(ctx, node)
    if scales is not None:
        return [empty, ctx.const([float(k) for k in scales], torch.float32)]
    sizes = shape_value(ctx, node)
    return [empty, empty, sizes if sizes is not None else ctx.ints(ctx.shape(node))]


@lowering(aten.upsample_nearest2d.vec, dtypes=FLOAT, check=_check_4d)
def lower_upsample_nearest2d_vec(ctx, node):
    x, _output_size, scale_factors = node.args
    return ctx.op("Resize", ctx.input(x), *_scales_or_sizes(ctx, node, ctx.arg(scale_factors)), mode="nearest",
                  coordinate_transformation_mode="asymmetric", nearest_mode="floor")


@lowering(aten.upsample_nearest2d.default, dtypes=FLOAT, check=_check_4d)
def lower_upsample_nearest2d(ctx, node):
    x = node.args[0]
    scales = [node.args[i] if len(node.args) > i else None for i in (2, 3)]
    # ATen's scales_h/scales_w are the user's scale factors (output/input), as ONNX Resize wants them.
    factors = [float(s) for s in scales] if all(s is not None for s in scales) else None
    return ctx.op("Resize", ctx.input(x), *_scales_or_sizes(ctx, node, factors), mode="nearest",
                  coordinate_transformation_mode="asymmetric", nearest_mode="floor")


@lowering(aten.upsample_bilinear2d.vec, dtypes=FLOAT, check=_check_4d)
def lower_upsample_bilinear2d_vec(ctx, node):
    x, _output_size, align_corners, scale_factors = node.args
    return _bilinear(ctx, node, x, align_corners, ctx.arg(scale_factors))


@lowering(aten.upsample_bilinear2d.default, dtypes=FLOAT, check=_check_4d)
def lower_upsample_bilinear2d(ctx, node):
    x, _output_size, align_corners = node.args[:3]
    scales = [node.args[i] if len(node.args) > i else None for i in (3, 4)]
    factors = [float(s) for s in scales] if all(s is not None for s in scales) else None  # output/input
    return _bilinear(ctx, node, x, align_corners, factors)


def _bilinear(ctx, node, x, align_corners, factors):
    if align_corners:
        # With align_corners PyTorch derives the mapping from sizes alone.
        inputs = _scales_or_sizes(ctx, node, None)
        mode = "align_corners"
    else:
        # half_pixel, not pytorch_half_pixel: the latter maps an output side of length 1 to input coordinate 0,
        # while ATen samples the centre ((0 + 0.5) * in/out - 0.5), as half_pixel does; longer sides agree.
        inputs = _scales_or_sizes(ctx, node, factors)
        mode = "half_pixel"
    return ctx.op("Resize", ctx.input(x), *inputs, mode="linear", coordinate_transformation_mode=mode)
