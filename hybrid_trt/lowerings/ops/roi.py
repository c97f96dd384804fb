"""torchvision's RoI Align (``torchvision.ops.roi_align``, ``MultiScaleRoIAlign``: the box head and mask head of
two-stage detectors) as ONNX's RoiAlign, whose "avg" mode is the same Detectron kernel: the same adaptive sampling
grid (``ceil(roi size / output size)`` samples per bin when ``sampling_ratio <= 0``), the same bilinear reads
(zero beyond one pixel outside the image, clamped at the edge), and ``aligned=False``'s RoIs forced to at least
1x1 (ONNX's ``output_half_pixel`` mode; ``aligned=True`` is ``half_pixel``, the half-pixel shift and no clamp).
torchvision's RoIs are ``[K, 5]`` rows ``(batch index, x1, y1, x2, y2)``; ONNX takes the boxes and the batch
indices apart.
"""
from __future__ import annotations

import torch

from ..registry import lowering

_ROI_ALIGN = "torchvision.roi_align.default"


def _check_roi_align(node):
    x = node.args[0].meta.get("val")
    if isinstance(x, torch.Tensor) and x.dim() != 4:
        return f"a {x.dim()}-D input (RoiAlign reads NCHW images)"
    return None


# float16: computed in float32 between casts (RoiAlign's kernels are float and double).
@lowering(_ROI_ALIGN, dtypes={torch.float32, torch.float16}, check=_check_roi_align)
def lower_roi_align(ctx, node):
    x, rois, spatial_scale, pooled_height, pooled_width, sampling_ratio, aligned = node.args
    index, boxes = ctx.op("Split", ctx.input(rois, torch.float32), ctx.ints([1, 4]), axis=1, outputs=2)
    batch = ctx.cast(ctx.op("Squeeze", index, ctx.ints([1])), torch.int64)
    out = ctx.op("RoiAlign", ctx.input(x, torch.float32), boxes, batch, mode="avg",
                 output_height=int(pooled_height), output_width=int(pooled_width),
                 sampling_ratio=max(int(sampling_ratio), 0), spatial_scale=float(spatial_scale),
                 coordinate_transformation_mode="half_pixel" if aligned else "output_half_pixel")
    return ctx.cast(out, torch.float16) if ctx.dtype(x) == torch.float16 else out
