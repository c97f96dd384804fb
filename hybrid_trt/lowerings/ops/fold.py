"""``F.fold`` / ``nn.Fold`` (``aten.col2im``: VOLO's outlook attention, overlapping patch merges): each kernel tap's
plane of columns placed on the padded image (on its stride phase), the planes summed, the padding cropped. ONNX's
Col2Im needs opset 18, and the decomposition Inductor's table gives (an accumulating index_put after a negative
pad) is a scatter, which the CPU provider runs element by element.

The planes are added in ATen's order (tap by tap, from zero), so float32 results are ATen's bit for bit (the
samples compare exactly); a NaN or an infinity reaches only the pixels its column covers (a one-hot convolution
would spread it through 0 * inf).
"""
from __future__ import annotations

import torch

from ..registry import FLOAT, lowering

aten = torch.ops.aten


def _check_col2im(node):
    x = node.args[0].meta.get("val")
    sizes = [*node.args[1], *(x.shape[-2:] if isinstance(x, torch.Tensor) else ())]  # not the batch: never written
    if any(not isinstance(s, int) for s in sizes):
        return "a symbolic image or column size (each tap's placement is written with the image's size)"
    return None


@lowering(aten.col2im.default, dtypes=FLOAT, check=_check_col2im)
def lower_col2im(ctx, node):
    x, (h, w), (kh, kw), (dh, dw), (ph, pw), (sh, sw) = node.args[:6]
    batched = len(ctx.shape(x)) == 3
    lh, lw = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1, (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    c = ctx.shape(x)[-2] // (kh * kw)
    cols = ctx.input(x) if batched else ctx.op("Unsqueeze", ctx.input(x), ctx.ints([0]))
    taps = ctx.op("Split", ctx.op("Reshape", cols, ctx.ints([0, c, kh * kw, lh, lw])), axis=2, outputs=kh * kw)
    taps = [taps] if kh * kw == 1 else taps  # one output is returned as its name
    # A tap's columns land every stride-th pixel, all on one phase (row % sh, col % sw) of the padded image: on
    # that phase's grid (a stride-th of the image) the tap is a plain shift. Each phase sums its taps there, in
    # tap order, and the phases are interleaved once (no gaps are written per tap).
    hc, wc = -(-(h + 2 * ph) // sh), -(-(w + 2 * pw) // sw)
    phases: dict = {}
    for k, tap in enumerate(taps):
        (top, py), (left, px) = divmod((k // kw) * dh, sh), divmod((k % kw) * dw, sw)
        placed = ctx.op("Pad", ctx.op("Squeeze", tap, ctx.ints([2])),
                        ctx.ints([0, 0, top, left, 0, 0, hc - top - lh, wc - left - lw]))
        phases[py, px] = placed if (py, px) not in phases else ctx.op("Add", phases[py, px], placed)
    if sh == sw == 1:
        image = phases[0, 0]
    else:  # phases no tap reaches (a kernel smaller than its stride) read zero
        zero = ctx.op("Expand", ctx.const(0.0, ctx.dtype(x)), ctx.op("Shape", next(iter(phases.values()))))
        rows = [ctx.op("Concat", *[ctx.op("Unsqueeze", phases.get((py, px), zero), ctx.ints([4]))
                                   for px in range(sw)], axis=4) for py in range(sh)]  # [n, c, hc, wc, sw]
        image = ctx.op("Concat", *[ctx.op("Unsqueeze", r, ctx.ints([3])) for r in rows], axis=3)
        image = ctx.op("Reshape", image, ctx.ints([0, c, hc * sh, wc * sw]))  # [n, c, hc, sh, wc, sw] interleaved
    out = ctx.op("Slice", image, ctx.ints([ph, pw]), ctx.ints([ph + h, pw + w]), ctx.ints([2, 3]))
    return out if batched else ctx.op("Squeeze", out, ctx.ints([0]))
