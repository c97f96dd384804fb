"""Sparse ops lower to hybrid_trt.sparse ONNX nodes that only the TensorRT
delegate accepts, and the AOT kernel for the TensorRT plugin compiles."""

from __future__ import annotations

import onnx
import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from hybrid_trt.delegates.registry import get_delegate
from hybrid_trt.lowerings import lower_to_onnx, lowering_for
from hybrid_trt.partitioner.capability import unsupported_reason
from hybrid_trt.plugins.sparse import lowering as sparse_lowering
from hybrid_trt.plugins.sparse import ops  # noqa: F401
from sparse_dense_ref import random_cloud

sparse = torch.ops.hybrid_trt


def _subm_conv_graph(dtype, with_bias):
    features, indices = random_cloud(1, (5, 6, 7), 0.2, 4, seed=0)
    weight = torch.randn(8, 3, 3, 3, 4)

    def f(features, indices, weight, *bias):
        nbr = sparse.sparse_rulebook_subm(indices, [5, 6, 7], [3, 3, 3], [1, 1, 1])
        order = sparse.sparse_rulebook_order(nbr) if bias else None
        out = sparse.sparse_conv_compute(features, weight, nbr, bias[0] if bias else None, order)
        back = sparse.sparse_rulebook_transpose(nbr, indices.shape[0])
        return out, back

    args = [features.to(dtype), indices, weight.to(dtype)] + ([torch.randn(8, dtype=dtype)] if with_bias else [])
    return make_fx(f)(*args), args


@pytest.mark.parametrize("dtype,with_bias", [(torch.float32, True), (torch.float16, False)])
def test_lowers_to_custom_domain_nodes(dtype, with_bias):
    gm, args = _subm_conv_graph(dtype, with_bias)
    model = lower_to_onnx(gm, [a.shape for a in args], [a.dtype for a in args])
    onnx.checker.check_model(model)
    custom = [n for n in model.graph.node if n.domain == sparse_lowering.DOMAIN]
    expected = ["SparseRulebookSubM", "SparseConv3d", "SparseRulebookTranspose"]
    if with_bias:
        expected.insert(1, "SparseRulebookOrder")
    assert [n.op_type for n in custom] == expected
    attrs = {n.op_type: {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute} for n in custom}
    assert attrs["SparseConv3d"] == {
        "plugin_namespace": b"hybrid_trt", "aot": 1, "kernel_volume": 27, "in_channels": 4, "out_channels": 8,
    }
    assert attrs["SparseRulebookSubM"]["spatial_shape"] == [5, 6, 7]
    assert attrs["SparseRulebookSubM"]["kernel_size"] == [3, 3, 3]
    assert attrs["SparseRulebookTranspose"]["num_in"] == args[1].shape[0]
    assert any(o.domain == sparse_lowering.DOMAIN for o in model.opset_import)
    # The conv's weight input is the [K, Cin, Cout] transpose of spconv's layout.
    conv = next(n for n in custom if n.op_type == "SparseConv3d")
    producer = {o: n for n in model.graph.node for o in n.output}
    assert producer[conv.input[1]].op_type == "Transpose"
    # Without a schedule from sparse_rulebook_order the plugin gets the identity one.
    assert producer[conv.input[3]].op_type == ("SparseRulebookOrder" if with_bias else "Range")


def test_only_tensorrt_accepts_the_domain():
    gm, _ = _subm_conv_graph(torch.float32, True)
    node = next(n for n in gm.graph.nodes if n.target is sparse.sparse_conv_compute.default)
    assert lowering_for(node.target).unsupported_reason(node) is None
    ort = get_delegate("onnxruntime")
    assert "domain 'hybrid_trt.sparse' not supported" in unsupported_reason(node, ort, frozenset())
    # TensorRT takes the domain; on this CPU graph it only objects to the device.
    trt_reason = unsupported_reason(node, get_delegate("tensorrt"), frozenset())
    assert trt_reason is not None and "device cpu" in trt_reason


def test_strided_rulebook_stays_with_inductor():
    _, indices = random_cloud(1, (5, 6, 7), 0.2, 1, seed=0)
    gm = make_fx(
        lambda i: sparse.sparse_rulebook_strided(i, [5, 6, 7], [3, 3, 3], [2, 2, 2], [1, 1, 1], [1, 1, 1]),
        tracing_mode="symbolic",
    )(indices)
    node = next(n for n in gm.graph.nodes if n.target is sparse.sparse_rulebook_strided.default)
    assert "data-dependent output size" in lowering_for(node.target).unsupported_reason(node)


def test_compute_lowering_refuses_mixed_dtypes():
    gm, _ = _subm_conv_graph(torch.float32, True)
    node = next(n for n in gm.graph.nodes if n.target is sparse.sparse_conv_compute.default)
    node.args[1].meta["val"] = node.args[1].meta["val"].half()
    assert "share fp32 or fp16" in lowering_for(node.target).unsupported_reason(node)


@pytest.mark.parametrize("dtype,c_in,c_out", [("fp16", 64, 64), ("fp32", 4, 16)])
def test_aot_kernel_compiles_to_ptx(dtype, c_in, c_out):
    pytest.importorskip("triton")
    from hybrid_trt.plugins.sparse.aot import compile_conv_kernel

    kernel = compile_conv_kernel(dtype, 27, c_in, c_out, capability=90)
    assert kernel.name == "_implicit_gemm_kernel"
    assert ".entry _implicit_gemm_kernel" in kernel.ptx
    assert kernel.block_m >= 16 and kernel.block_n >= 16 and kernel.num_warps in (4, 8)
    if dtype == "fp16":
        assert "wgmma" in kernel.ptx  # Hopper tensor cores
    with pytest.raises(ValueError, match="supports"):
        compile_conv_kernel("bf16", 27, c_in, c_out)


def test_fused_subm_rulebook_lowers_to_map_and_order_nodes():
    features, indices = random_cloud(1, (5, 6, 7), 0.2, 4, seed=1)
    weight = torch.randn(8, 3, 3, 3, 4)

    def f(features, indices, weight):
        nbr, order = sparse.sparse_rulebook_subm_ordered(indices, [5, 6, 7], [3, 3, 3], [1, 1, 1])
        return (sparse.sparse_conv_compute(features, weight, nbr, None, order),)

    args = [features, indices, weight]
    gm = make_fx(f)(*args)
    model = lower_to_onnx(gm, [a.shape for a in args], [a.dtype for a in args])
    onnx.checker.check_model(model)
    custom = [n for n in model.graph.node if n.domain == sparse_lowering.DOMAIN]
    assert [n.op_type for n in custom] == ["SparseRulebookSubM", "SparseRulebookOrder", "SparseConv3d"]
    subm, order, conv = custom
    assert order.input == [subm.output[0]]
    assert conv.input[2] == subm.output[0] and conv.input[3] == order.output[0]
