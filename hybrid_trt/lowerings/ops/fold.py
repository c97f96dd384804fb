"""``F.fold`` / ``nn.Fold`` (``aten.col2im``: VOLO's outlook attention, overlapping patch merges): each kernel tap's
plane of columns placed on the padded image, the planes summed, the padding cropped. ONNX's Col2Im needs opset 18,
and the decomposition Inductor's table gives (an accumulating index_put after a negative pad) is a scatter, which
the CPU provider runs element by element.

The planes are added in ATen's order (tap by tap, from zero), so float32 results are ATen's bit for bit; a NaN or
an infinity reaches only the pixels its column covers (a one-hot convolution would spread it through 0 * inf).
"""
from __future__ import annotations

import torch

from ..registry import FLOAT, lowering

aten = torch.ops.aten


def _check_col2im(node):
    sizes = [*node.args[1], *(node.args[0].meta["val"].shape if "val" in node.args[0].meta else ())]
    if any(not isinstance(s, int) for s in sizes):
        return "symbolic sizes (each tap's placement is written with the image's size)"
    return None


@lowering(aten.col2im.default, dtypes=FLOAT, check=_check_col2im)
def lower_col2im(ctx, node):
    x, (h, w), (kh, kw), (dh, dw), (ph, pw), (sh, sw) = node.args[:6]
    batched = len(ctx.shape(x)) == 3
    lh, lw = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1, (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    c = ctx.shape(x)[-2] // (kh * kw)
    cols = ctx.input(x) if batched else ctx.op("Unsqueeze", ctx.input(x), ctx.ints([0]))
    taps = ctx.op("Split", ctx.op("Reshape", cols, ctx.ints([0, c, kh * kw, lh, lw])), axis=2, outputs=kh * kw)
    spread_h, spread_w = (lh - 1) * sh + 1, (lw - 1) * sw + 1  # a plane with the stride's gaps between columns
    total = None
    for k, tap in enumerate(taps):
        plane = ctx.op("Squeeze", tap, ctx.ints([2]))
        if sh > 1 or sw > 1:
            plane = ctx.op("Pad", ctx.op("Unsqueeze", plane, ctx.ints([3, 5])),  # [n, c, lh, 1, lw, 1]
                           ctx.ints([0, 0, 0, 0, 0, 0, 0, 0, 0, sh - 1, 0, sw - 1]))
            plane = ctx.op("Slice", ctx.op("Reshape", plane, ctx.ints([0, c, lh * sh, lw * sw])),
                           ctx.ints([0, 0]), ctx.ints([spread_h, spread_w]), ctx.ints([2, 3]))
        top, left = (k // kw) * dh, (k % kw) * dw
        bottom, right = h + 2 * ph - top - spread_h, w + 2 * pw - left - spread_w
        placed = ctx.op("Pad", plane, ctx.ints([0, 0, top, left, 0, 0, bottom, right]))
        total = placed if total is None else ctx.op("Add", total, placed)
    out = ctx.op("Slice", total, ctx.ints([ph, pw]), ctx.ints([ph + h, pw + w]), ctx.ints([2, 3]))
    return out if batched else ctx.op("Squeeze", out, ctx.ints([0]))
