"""The onnxruntime delegate on its own: engines fed through IO binding (outputs are fresh torch tensors, inputs of
any layout), thread count following torch or the option, CPU provider."""
import onnx
import torch
from onnx import TensorProto, helper

from hybrid_trt import make_options
from hybrid_trt.delegates import available_delegates, get_delegate


def _add_relu_model():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    out = helper.make_tensor_value_info("out", TensorProto.FLOAT, [2, 3])
    idx = helper.make_tensor_value_info("idx", TensorProto.INT64, [2, 1])
    nodes = [helper.make_node("Add", ["x", "y"], ["s"]), helper.make_node("Relu", ["s"], ["out"]),
             helper.make_node("ArgMax", ["s"], ["idx"], axis=1, keepdims=1)]
    graph = helper.make_graph(nodes, "g", [x, y], [out, idx])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _build(options):
    metas = [torch.empty(2, 3), torch.empty(2, 1, dtype=torch.int64)]
    return get_delegate("onnxruntime").build(_add_relu_model(), metas, torch.device("cpu"), options)


def test_available_delegates_tensorrt_first():
    assert "onnxruntime" in available_delegates()
    if not torch.cuda.is_available():  # CPU machines: TensorRT says what is missing
        assert available_delegates() == ("onnxruntime",)
        assert get_delegate("tensorrt").unavailable_reason()
    else:
        assert available_delegates()[0] == "tensorrt" or get_delegate("tensorrt").unavailable_reason()


def test_engine_runs_with_io_binding_on_any_layout():
    onnx.checker.check_model(_add_relu_model())
    engine = _build(make_options(environ={}))
    x = torch.randn(3, 2).t()  # non-contiguous
    y = torch.randn(2, 3)
    out, idx = engine([x, y])
    torch.testing.assert_close(out, torch.relu(x + y))
    assert torch.equal(idx, torch.argmax(x + y, dim=1, keepdim=True))
    assert out.dtype == torch.float32 and idx.dtype == torch.int64
    out2, _ = engine([y, x])  # every call returns new tensors: earlier results stay valid
    assert out2.data_ptr() != out.data_ptr()
    torch.testing.assert_close(out, torch.relu(x + y))


def test_threads_follow_torch_or_the_option():
    engine = _build(make_options(environ={}))
    assert engine._session.get_session_options().intra_op_num_threads == torch.get_num_threads()
    engine = _build(make_options({"num_threads": 1}, environ={}))
    assert engine._session.get_session_options().intra_op_num_threads == 1
    assert engine._session.get_providers() == ["CPUExecutionProvider"]
