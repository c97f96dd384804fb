"""grid_sample (4-D) as one ONNX GridSample, which was defined after PyTorch's (same modes, padding and
align_corners conventions). Having a lowering keeps aten.grid_sampler_2d out of the capture's decomposition
table; decomposed, each call became four reads x[n, c, iy, ix] through output-sized index tensors, which ONNX
Runtime ran 2.4x slower than eager's kernel on RAFT (192 calls)."""
from __future__ import annotations

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
