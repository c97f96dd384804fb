"""TensorRT plugins for the sparse ops, through TensorRT's Python plugin API
(``tensorrt.plugin``, "quickly deployable plugins", TensorRT >= 10.8).

Imported by ``hybrid_trt.plugins.sparse`` only when ``tensorrt`` is
importable. The plugin names and attributes match the ONNX nodes written by
lowering.py (op type = plugin name, ``plugin_namespace`` attribute, ``aot``
attribute selecting the AOT implementation).

  hybrid_trt::SparseConv3d           JIT impl + AOT impl (Triton PTX)
  hybrid_trt::SparseRulebookSubM     JIT impl (torch sort + Triton search)
  hybrid_trt::SparseRulebookTranspose JIT impl
  hybrid_trt::SparseRulebookOrder    JIT impl

NOT RUN: TensorRT cannot be installed on the machines this was developed on.
This is written against the documented API and kept thin; the kernels it
launches are the same ones the tests check. The AOT kernel's PTX generation
(aot.py) is tested without TensorRT.
"""

from __future__ import annotations

from typing import List, Tuple, Union

import numpy as np
import numpy.typing as npt
import tensorrt as trt
import tensorrt.plugin as trtp
import torch

from . import aot, ops, triton_gemm
from .lowering import PLUGIN_NAMESPACE

CONV = f"{PLUGIN_NAMESPACE}::SparseConv3d"
SUBM = f"{PLUGIN_NAMESPACE}::SparseRulebookSubM"
TRANSPOSE = f"{PLUGIN_NAMESPACE}::SparseRulebookTranspose"
ORDER = f"{PLUGIN_NAMESPACE}::SparseRulebookOrder"


def _torch(t: trtp.Tensor) -> torch.Tensor:
    return torch.as_tensor(t, device="cuda")


# ---------------------------------------------------------------- conv compute


@trtp.register(CONV)
def _conv_desc(
    features: trtp.TensorDesc,
    weight: trtp.TensorDesc,
    nbr: trtp.TensorDesc,
    order: trtp.TensorDesc,
    bias: trtp.TensorDesc,
    kernel_volume: int,
    in_channels: int,
    out_channels: int,
) -> trtp.TensorDesc:
    return trtp.from_shape_expr((nbr.shape_expr[0], out_channels), dtype=features.dtype)


@trtp.autotune(CONV)
def _conv_autotune(features, weight, nbr, order, bias, outputs) -> List[trtp.AutoTuneCombination]:
    # features, weight, bias and output share one float type; rulebook and order are int32.
    return [trtp.AutoTuneCombination("FP32|FP16, FP32|FP16, INT32, INT32, FP32|FP16, FP32|FP16", "LINEAR")]


@trtp.impl(CONV)
def _conv_impl(
    features: trtp.Tensor,
    weight: trtp.Tensor,
    nbr: trtp.Tensor,
    order: trtp.Tensor,
    bias: trtp.Tensor,
    kernel_volume: int,
    in_channels: int,
    out_channels: int,
    outputs: Tuple[trtp.Tensor],
    stream: int,
) -> None:
    with torch.cuda.stream(torch.cuda.ExternalStream(stream)):
        triton_gemm.conv_compute_kcc(
            _torch(features), _torch(weight), _torch(nbr), _torch(bias), _torch(outputs[0]), _torch(order)
        )


@trtp.aot_impl(CONV)
def _conv_aot_impl(
    features: trtp.TensorDesc,
    weight: trtp.TensorDesc,
    nbr: trtp.TensorDesc,
    order: trtp.TensorDesc,
    bias: trtp.TensorDesc,
    kernel_volume: int,
    in_channels: int,
    out_channels: int,
    outputs: Tuple[trtp.TensorDesc],
    tactic: int,
) -> Tuple[Union[str, bytes], Union[str, bytes], trtp.KernelLaunchParams, trtp.SymExprs]:
    dtype = "fp16" if features.dtype == trt.float16 else "fp32"
    major, minor = torch.cuda.get_device_capability()
    kernel = aot.compile_conv_kernel(dtype, kernel_volume, in_channels, out_channels, capability=10 * major + minor)
    m = nbr.shape_expr[0]
    params = trtp.KernelLaunchParams()
    params.grid_x = trtp.cdiv(m, kernel.block_m)
    params.grid_y = -(-out_channels // kernel.block_n)
    params.block_x = kernel.num_warps * 32
    params.shared_mem = kernel.shared_mem
    # The one runtime scalar (row count) follows the input pointers, as in the
    # kernel's signature; channel counts are compiled in.
    scalars = trtp.SymIntExprs.from_tuple([trtp.SymInt32(m)])
    return kernel.name.encode(), kernel.ptx.encode(), params, scalars


# ---------------------------------------------------------------- rulebooks


@trtp.register(SUBM)
def _subm_desc(
    indices: trtp.TensorDesc,
    spatial_shape: npt.NDArray[np.int32],
    kernel_size: npt.NDArray[np.int32],
    dilation: npt.NDArray[np.int32],
) -> trtp.TensorDesc:
    return trtp.from_shape_expr((indices.shape_expr[0], int(np.prod(kernel_size))), dtype=trt.int32)


@trtp.impl(SUBM)
def _subm_impl(indices, spatial_shape, kernel_size, dilation, outputs, stream) -> None:
    with torch.cuda.stream(torch.cuda.ExternalStream(stream)):
        nbr = ops.sparse_rulebook_subm(
            _torch(indices), spatial_shape.tolist(), kernel_size.tolist(), dilation.tolist()
        )
        _torch(outputs[0]).copy_(nbr)


@trtp.register(TRANSPOSE)
def _transpose_desc(nbr: trtp.TensorDesc, num_in: int) -> trtp.TensorDesc:
    return trtp.from_shape_expr((num_in, nbr.shape_expr[1]), dtype=trt.int32)


@trtp.impl(TRANSPOSE)
def _transpose_impl(nbr, num_in: int, outputs, stream) -> None:
    with torch.cuda.stream(torch.cuda.ExternalStream(stream)):
        _torch(outputs[0]).copy_(ops.sparse_rulebook_transpose(_torch(nbr), num_in))


@trtp.register(ORDER)
def _order_desc(nbr: trtp.TensorDesc) -> trtp.TensorDesc:
    return trtp.from_shape_expr((nbr.shape_expr[0],), dtype=trt.int32)


@trtp.impl(ORDER)
def _order_impl(nbr, outputs, stream) -> None:
    with torch.cuda.stream(torch.cuda.ExternalStream(stream)):
        _torch(outputs[0]).copy_(ops.sparse_rulebook_order(_torch(nbr)))
