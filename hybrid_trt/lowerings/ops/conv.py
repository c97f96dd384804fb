"""Convolution and transposed convolution (1-D to 3-D) as ONNX Conv / ConvTranspose."""
from __future__ import annotations

import torch

from ..registry import FLOAT, lowering

aten = torch.ops.aten


def _check_conv(node):
    x = node.args[0].meta.get("val")
    if x is None or x.dim() not in (3, 4, 5):
        return "only 1-D, 2-D and 3-D convolutions"
    if not isinstance(node.args[1].meta.get("val"), torch.Tensor):
        return "weight is not a tensor"
    padding = node.args[4]
    if isinstance(padding, str):
        return f"padding={padding!r}"
    stride, transposed, output_padding = node.args[3], node.args[6], node.args[7]
    if transposed:
        spatial = x.dim() - 2
        stride, output_padding = _expand(stride, spatial), _expand(output_padding, spatial)
        # ATen allows output_padding < max(stride, dilation); ONNX Runtime's ConvTranspose recomputes the input
        # size from the output size and rejects the node at run time unless output_padding < stride.
        if any(op >= s for op, s in zip(output_padding, stride)):
            return (f"transposed convolution with output_padding {output_padding} not below stride {stride} "
                    "(ONNX Runtime rejects it)")
    return None


@lowering(aten.convolution.default, dtypes=FLOAT, check=_check_conv)
def lower_convolution(ctx, node):
    x, w, b, stride, padding, dilation, transposed, output_padding, groups = node.args
    spatial = len(ctx.shape(x)) - 2
    stride, padding, dilation = (_expand(ctx.arg(v), spatial) for v in (stride, padding, dilation))
    inputs = [ctx.input(x), ctx.input(w)]
    if b is not None:
        inputs.append(ctx.input(b))
    kernel = ctx.shape(w)[2:]
    attrs = dict(strides=stride, pads=padding + padding, dilations=dilation, group=int(ctx.arg(groups)),
                 kernel_shape=kernel)
    if transposed:
        return ctx.op("ConvTranspose", *inputs, output_padding=_expand(ctx.arg(output_padding), spatial), **attrs)
    return ctx.op("Conv", *inputs, **attrs)


def _expand(v, n):
    v = [int(e) for e in v]
    return v * n if len(v) == 1 else v
