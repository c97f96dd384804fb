"""The onnxruntime delegate on its own: engines fed through IO binding (outputs are fresh torch tensors, inputs of
any layout), thread count following torch or the option, CPU provider."""
import json
import os
import threading

import numpy as np

import onnx
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

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


def _build(options, keep_serialized=False):
    metas = [torch.empty(2, 3), torch.empty(2, 1, dtype=torch.int64)]
    delegate = get_delegate("onnxruntime")
    return delegate.build(_add_relu_model(), metas, torch.device("cpu"), delegate.options_from(options),
                          keep_serialized=keep_serialized)


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


def test_cpu_engine_call_prepared_at_build_matches_the_public_binding_path():
    """The CPU engine binds through ONNX Runtime's binding objects resolved at construction; the public IOBinding
    wrappers (what it falls back to) must give the same results, outputs and errors."""
    from hybrid_trt.delegates.onnxruntime_delegate import OnnxRuntimeEngine
    engine = _build(make_options(environ={}))
    assert engine._cpu_call is not None  # this onnxruntime has the binding objects
    public = OnnxRuntimeEngine(engine._session, [torch.empty(2, 3), torch.empty(2, 1, dtype=torch.int64)],
                               torch.device("cpu"))
    public._cpu_call = None
    x, y = torch.randn(3, 2).t(), torch.randn(2, 3)
    for a, b in zip(engine([x, y]), public([x, y])):
        assert torch.equal(a, b) and a.dtype == b.dtype and a.is_contiguous()
    first = engine([x, y])[0]
    assert engine([y, x])[0].data_ptr() != first.data_ptr()  # fresh outputs: earlier results stay valid
    torch.testing.assert_close(first, torch.relu(x + y))
    for run in (engine, public):
        with pytest.raises(Exception, match="invalid dimensions"):
            run([torch.randn(1, 3), y])


def test_engine_refuses_an_input_shape_it_was_not_built_for():
    """Inputs are bound with their own shapes, so ONNX Runtime checks them: a smaller input must not be read
    past its end as if it had the built shape (on CUDA that was an illegal memory access)."""
    engine = _build(make_options(environ={}))
    for x in (torch.randn(1, 3), torch.randn(4, 3)):
        with pytest.raises(Exception, match="invalid dimensions"):
            engine([x, torch.randn(2, 3)])


def test_threads_follow_torch_or_the_option():
    engine = _build(make_options(environ={}))
    assert engine._session.get_session_options().intra_op_num_threads == torch.get_num_threads()
    engine = _build(make_options({"num_threads": 1}, environ={}))
    assert engine._session.get_session_options().intra_op_num_threads == 1
    assert engine._session.get_providers() == ["CPUExecutionProvider"]


def test_serialize_and_load_skip_graph_optimization(tmp_path):
    """The stored form is the lowered model and ONNX Runtime's optimized model; loading runs the optimized one
    with graph optimization off, and gives the same results."""
    delegate = get_delegate("onnxruntime")
    options = make_options(environ={})
    engine = _build(options, keep_serialized=True)
    files = delegate.serialize(engine)
    assert set(files) == {"model.onnx", "optimized.onnx", "session.json"}
    assert onnx.load_from_string(files["model.onnx"]).graph.node[0].op_type == "Add"
    onnx.load_from_string(files["optimized.onnx"])  # a valid ONNX model
    metas = [torch.empty(2, 3, device="meta"), torch.empty(2, 1, dtype=torch.int64, device="meta")]
    loaded = delegate.load(files, metas, torch.device("cpu"), delegate.options_from(options))
    ort = __import__("onnxruntime")
    assert loaded._session.get_session_options().graph_optimization_level == \
        ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    x, y = torch.randn(2, 3), torch.randn(2, 3)
    for got, want in zip(loaded([x, y]), engine([x, y])):
        assert torch.equal(got, want)
    # Without the optimized model (or with a broken one) the lowered model is optimized again.
    again = delegate.load({"model.onnx": files["model.onnx"], "optimized.onnx": b"not onnx"}, metas,
                          torch.device("cpu"), delegate.options_from(options))
    assert again._session.get_session_options().graph_optimization_level == \
        ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    torch.testing.assert_close(again([x, y])[0], torch.relu(x + y))


def test_options_from_reads_only_its_settings():
    delegate = get_delegate("onnxruntime")
    base = delegate.options_from(make_options({"num_threads": 1}, environ={}))
    assert base["threads"] == 1 and base["provider"] == "auto"
    assert delegate.options_from(make_options({"num_threads": 1, "min_block_size": 7}, environ={})) == base
    assert delegate.options_from(make_options({"num_threads": 2}, environ={})) != base


def _one_node_model(op_type, domain=""):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])
    out = helper.make_tensor_value_info("out", TensorProto.FLOAT, None)
    inputs = ["x", "x"] if op_type in ("MatMul", "Gemm", "Conv") else ["x"]
    graph = helper.make_graph([helper.make_node(op_type, inputs, ["out"], domain=domain)], "g", [x], [out])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("conv,matmul", [(True, False), (True, True), (False, True), (False, False)])
def test_tf32_only_where_pytorch_would_use_it_for_every_op_the_session_holds(conv, matmul):
    """ONNX Runtime has one TF32 switch per session; PyTorch one for cuDNN convolutions and one for matmuls. A
    session uses TF32 only if PyTorch would for each convolution and matmul it holds (never less precise than
    eager), and the two switches are engine settings, so the key changes with them."""
    from hybrid_trt.delegates.tf32 import uses_tf32 as session_uses_tf32
    delegate = get_delegate("onnxruntime")
    saved = torch.backends.cudnn.allow_tf32, torch.get_float32_matmul_precision()
    try:
        torch.backends.cudnn.allow_tf32 = conv
        torch.set_float32_matmul_precision("high" if matmul else "highest")
        opts = delegate.options_from(make_options(environ={}))
    finally:
        torch.backends.cudnn.allow_tf32 = saved[0]
        torch.set_float32_matmul_precision(saved[1])
    assert (opts["tf32_convolutions"], opts["tf32_matmul"]) == (conv, matmul)
    conv_model, mm_model = _one_node_model("Conv"), _one_node_model("MatMul")
    both = _one_node_model("Conv")
    both.graph.node.append(helper.make_node("Gemm", ["out", "out"], ["out2"]))
    assert session_uses_tf32(conv_model, opts) == conv
    assert session_uses_tf32(mm_model, opts) == matmul
    assert session_uses_tf32(both, opts) == (conv and matmul)
    assert session_uses_tf32(_add_relu_model(), opts) is False  # nothing the switch reaches
    assert session_uses_tf32(_one_node_model("FusedMatMul", "com.microsoft"), opts) is False
    settings = {"use_tf32": session_uses_tf32(mm_model, opts), "prefer_nhwc": False}
    cuda_opts = dict(delegate.providers(torch.device("cuda"), opts, None, settings)[0][1])
    assert cuda_opts["use_tf32"] == int(matmul)


@pytest.mark.parametrize("dtype,expected", [(torch.float16, True), (torch.bfloat16, True), (torch.float32, False)])
def test_tf32_off_does_not_reach_fp16_convolutions_and_matmuls(dtype, expected):
    """TF32 is a float32 format: with PyTorch's switches off, an engine of fp16/bf16 convolutions and matmuls
    still may use it (ONNX Runtime's use_tf32=0 would keep its fp16 convolutions off the tensor cores, ~5x slower
    on the H200, for nothing eager does), while any float32 one it holds keeps TF32 off. Checked on models our
    lowering produced, whose intermediate tensors carry no declared types."""
    import torch.nn as nn
    from torch.fx.experimental.proxy_tensor import make_fx

    from hybrid_trt.delegates.tf32 import uses_tf32
    from hybrid_trt.lowerings.to_onnx import lower_partition

    class ConvMatmul(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.fc = nn.Conv2d(3, 4, 3), nn.Linear(6, 5)

        def forward(self, x):
            return self.fc(torch.relu(self.conv(x)))

    module = ConvMatmul().to(dtype)
    with torch.no_grad():  # an inference graph, as partitions are (in grad mode torch 2.13's make_fx adds detach)
        gm = make_fx(lambda x: (module(x),))(torch.randn(1, 3, 8, 8, dtype=dtype))  # ATen ops, weights as constants
    model, _ = lower_partition(gm, [(1, 3, 8, 8)], [dtype])
    assert {n.op_type for n in model.graph.node} & {"Conv", "MatMul", "Gemm"}
    off = {"tf32_convolutions": False, "tf32_matmul": False}
    assert uses_tf32(model, off) is expected
    assert uses_tf32(model, {"tf32_convolutions": True, "tf32_matmul": True}) is True
    # fp16 convolutions beside a float32 matmul: the float32 one decides.
    mixed = _conv_model(TensorProto.FLOAT16)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])
    mixed.graph.input.append(y)
    mixed.graph.node.append(helper.make_node("MatMul", ["y", "y"], ["z"]))
    assert uses_tf32(mixed, {"tf32_convolutions": False, "tf32_matmul": True}) is True
    assert uses_tf32(mixed, {"tf32_convolutions": True, "tf32_matmul": False}) is False


def test_tf32_types_a_node_from_its_weight_and_counts_function_nodes_as_float32():
    """An fp16 MatMul whose data input comes out of an op type inference cannot type (a custom domain) is typed by
    its fp16 weight; a MatMul inside a function counts as float32, whatever a main-graph tensor of the same name is."""
    from hybrid_trt.delegates.tf32 import uses_tf32

    off = {"tf32_convolutions": False, "tf32_matmul": False}
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT16, [2, 2])
    out = helper.make_tensor_value_info("out", TensorProto.FLOAT16, None)
    w = numpy_helper.from_array(np.ones((2, 2), dtype=np.float16), "w")
    nodes = [helper.make_node("Foo", ["x"], ["y"], domain="hybrid_trt.test"),
             helper.make_node("MatMul", ["y", "w"], ["out"])]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [out], initializer=[w]),
                              opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("hybrid_trt.test", 1)],
                              ir_version=8)
    assert uses_tf32(model, off) is True
    fn = helper.make_function("hybrid_trt.test", "Mm", ["x"], ["z"], [helper.make_node("MatMul", ["x", "x"], ["z"])],
                              [helper.make_opsetid("", 17)])
    call = helper.make_node("Mm", ["x"], ["out"], domain="hybrid_trt.test")
    with_function = helper.make_model(helper.make_graph([call], "g", [x], [out]), functions=[fn],
                                      opset_imports=[helper.make_opsetid("", 17),
                                                     helper.make_opsetid("hybrid_trt.test", 1)], ir_version=8)
    assert uses_tf32(with_function, off) is False


class _FakeBuilderConfig:
    """Records the flags set and cleared (TensorRT cannot run on the machines this is developed on)."""

    def __init__(self):
        self.flags = {"TF32"}  # TensorRT's default

    def set_flag(self, flag):
        self.flags.add(flag)

    def clear_flag(self, flag):
        self.flags.discard(flag)


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_tensorrt_clears_tf32_where_pytorch_would_not_use_it(precision):
    import types
    from hybrid_trt.delegates.tensorrt_delegate import set_precision_flags
    trt = types.SimpleNamespace(BuilderFlag=types.SimpleNamespace(TF32="TF32", FP16="FP16", BF16="BF16"))
    conv, mm = _one_node_model("Conv"), _one_node_model("MatMul")
    for model, switches, want_tf32 in [(conv, (True, False), True), (mm, (True, False), False),
                                       (mm, (True, True), True), (conv, (False, True), False)]:
        config = _FakeBuilderConfig()
        opts = {"precision": precision, "tf32_convolutions": switches[0], "tf32_matmul": switches[1]}
        set_precision_flags(trt, config, model, opts)
        assert ("TF32" in config.flags) == want_tf32
        assert ("FP16" in config.flags) == (precision == "fp16")
    assert {"tf32_convolutions", "tf32_matmul"} <= set(get_delegate("tensorrt").options_from(make_options(environ={})))


def test_tf32_decision_is_stored_with_the_engine_and_read_at_load(tmp_path):
    """The decision is made from the lowered model at build (the optimized model's fused nodes no longer tell it)
    and stored with the engine; a package ships it beside the model that loads."""
    delegate = get_delegate("onnxruntime")
    options = make_options(environ={})
    files = delegate.serialize(_build(options, keep_serialized=True))
    assert json.loads(files["session.json"]) == {"use_tf32": False, "prefer_nhwc": False}
    assert delegate.deploy_files(set(files)) == {"optimized.onnx", "session.json"}
    assert delegate.deploy_files({"model.onnx"}) == {"model.onnx"}


def _conv_model(dtype, group=1, rank=4, channels=4):
    """One Conv whose weight is an initializer of ``dtype`` (float16 or float32)."""
    shape = [channels, channels // group] + [3] * (rank - 2)
    weight = numpy_helper.from_array(np.zeros(shape, dtype=np.float16 if dtype == TensorProto.FLOAT16 else
                                              np.float32), "w")
    x = helper.make_tensor_value_info("x", dtype, [1, channels] + [8] * (rank - 2))
    out = helper.make_tensor_value_info("out", dtype, None)
    graph = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["out"], group=group)], "g", [x], [out],
                              initializer=[weight])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("model,auto", [
    (lambda: _conv_model(TensorProto.FLOAT16), True),               # ResNets in fp16: NHWC 0.63-0.98x NCHW
    (lambda: _conv_model(TensorProto.FLOAT16, group=4), False),     # depthwise (MobileNet, ConvNeXt): 1.01-1.07x
    (lambda: _conv_model(TensorProto.FLOAT), False),                # fp32: up to 1.16x
    (lambda: _conv_model(TensorProto.FLOAT16, rank=5), False),      # 3-D convolutions: not measured
    (_add_relu_model, False),                                       # no convolution at all
])
def test_cuda_layout_follows_the_option_else_the_measured_rule(model, auto):
    from hybrid_trt.delegates.onnxruntime_delegate import cuda_layout_nhwc, session_settings
    m = model()
    assert cuda_layout_nhwc(m, "auto") is auto
    assert cuda_layout_nhwc(m, "nhwc") is True and cuda_layout_nhwc(m, "nchw") is False
    delegate = get_delegate("onnxruntime")
    opts = delegate.options_from(make_options({"onnxruntime_cuda_layout": "nhwc"}, environ={}))
    assert opts["cuda_layout"] == "nhwc"  # a delegate option, so part of the engine key
    assert session_settings(m, torch.device("cuda"), opts)["prefer_nhwc"] is True
    assert session_settings(m, torch.device("cpu"), opts)["prefer_nhwc"] is False  # the CPU provider has none
    cuda_opts = dict(delegate.providers(torch.device("cuda"), opts, None, {"prefer_nhwc": True})[0][1])
    assert cuda_opts["prefer_nhwc"] == 1
    assert dict(delegate.providers(torch.device("cuda"), opts, None, None)[0][1])["prefer_nhwc"] == 0
    with pytest.raises(ValueError, match="onnxruntime_cuda_layout.*'nhcw'.*one of"):
        make_options({"onnxruntime_cuda_layout": "nhcw"}, environ={})


def test_an_nhwc_session_is_stored_without_its_optimized_model(monkeypatch):
    """The CUDA provider's NHWC layout pass writes nodes of an internal domain into the optimized model, which are
    not for reloading: such an engine stores the lowered model alone, with the decision, and a load optimizes it
    again under the same settings."""
    import hybrid_trt.delegates.onnxruntime_delegate as ortd
    monkeypatch.setattr(ortd, "session_settings", lambda *a: {"use_tf32": False, "prefer_nhwc": True})
    delegate = get_delegate("onnxruntime")
    files = delegate.serialize(_build(make_options(environ={}), keep_serialized=True))
    assert "optimized.onnx" not in files
    assert json.loads(files["session.json"]) == {"use_tf32": False, "prefer_nhwc": True}
    assert delegate.deploy_files(set(files)) == {"model.onnx", "session.json"}
    seen = []
    real = delegate.session
    monkeypatch.setattr(delegate, "session", lambda *a, **k: seen.append(k.get("settings")) or real(*a, **k))
    metas = [torch.empty(2, 3), torch.empty(2, 1, dtype=torch.int64)]
    delegate.load(files, metas, torch.device("cpu"), delegate.options_from(make_options(environ={})))
    assert seen == [{"use_tf32": False, "prefer_nhwc": True}]


def test_sessions_spin_only_while_they_run():
    """ONNX Runtime's workers spin during a run (an op-heavy graph waits less for them) and stop the moment the run
    returns: idle spinners would take the cores that other models' sessions and Inductor's OpenMP threads need next
    (issue 7: two models on 2 cores ran at half speed)."""
    engine = _build(make_options(environ={}))
    so = engine._session.get_session_options()
    assert so.get_session_config_entry("session.intra_op.allow_spinning") == "1"
    assert so.get_session_config_entry("session.force_spinning_stop") == "1"
    assert so.get_session_config_entry("session.inter_op.allow_spinning") == "0"


_IDLE_SCRIPT = r'''
import sys, time
import numpy as np, onnx, onnxruntime as ort
from onnx import TensorProto, helper
from hybrid_trt.delegates.onnxruntime_delegate import _session_options
x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [512, 512])
y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [512, 512])
w = onnx.numpy_helper.from_array(np.random.rand(512, 512).astype(np.float32), "w")
graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Relu", ["m"], ["y"])],
                          "g", [x], [y], [w])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
so = _session_options(2) if sys.argv[1] == "ours" else ort.SessionOptions()
if sys.argv[1] != "ours":
    so.intra_op_num_threads = 2
session = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
feed = {"x": np.random.rand(512, 512).astype(np.float32)}
for _ in range(20):
    session.run(None, feed)
t0 = time.process_time()
time.sleep(0.3)
print(time.process_time() - t0)
'''


def test_workers_take_no_cpu_once_a_run_returns():
    """Measured, not read from the settings: the CPU time the process takes in the 0.3 s after its last run. A
    session with ONNX Runtime's defaults keeps its workers spinning after each run (25 ms of CPU in those 0.3 s
    on the 2-core machine); the delegate's sessions stop them at once."""
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-c", _IDLE_SCRIPT, "ours"], capture_output=True, text=True, timeout=120,
                         cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert out.returncode == 0, out.stderr[-2000:]
    idle_cpu_s = float(out.stdout.split()[-1])
    assert idle_cpu_s < 0.008, f"{idle_cpu_s:.3f} s of CPU while idle: ONNX Runtime's workers went on spinning"


_LOGGING_SCRIPT = r'''
import logging, sys
import torch
from onnx import TensorProto, helper, numpy_helper
from hybrid_trt import make_options
from hybrid_trt.delegates import get_delegate
if sys.argv[1] == "debug":
    logging.basicConfig(level=logging.DEBUG, format="%(name)s %(levelname)s %(message)s")
data = helper.make_tensor_value_info("d", TensorProto.FLOAT, [4, 3])
idx = helper.make_tensor_value_info("i", TensorProto.INT64, [2])
out = helper.make_tensor_value_info("out", TensorProto.FLOAT, [2, 3])
unused = helper.make_tensor("unused", TensorProto.FLOAT, [1], [0.0])  # ONNX Runtime warns about it at creation
graph = helper.make_graph([helper.make_node("Gather", ["d", "i"], ["out"])], "g", [data, idx], [out], [unused])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
delegate = get_delegate("onnxruntime")
settings = delegate.options_from(make_options(environ={}))
engine = delegate.build(model, [torch.empty(2, 3)], torch.device("cpu"), settings)
try:
    engine([torch.zeros(4, 3), torch.tensor([0, 7])])
    print("no error")
except Exception as e:
    print("raised:", e)
'''


def _run_logging_script(mode):
    import subprocess
    import sys
    return subprocess.run([sys.executable, "-c", _LOGGING_SCRIPT, mode], capture_output=True, text=True,
                          timeout=300, cwd=str(__import__("pathlib").Path(__file__).parents[1]))


def test_onnxruntime_log_lines_stay_off_stderr_and_errors_still_raise():
    """ONNX Runtime logs a failing run at ERROR on its own stderr sink (and warns at session creation); users
    see neither, while the failure itself still raises with ONNX Runtime's message (which the runtime turns into
    a fallback warning on the hybrid_trt logger, or raises with strict=True)."""
    proc = _run_logging_script("quiet")
    assert "raised:" in proc.stdout and "out of data bounds" in proc.stdout, (proc.stdout, proc.stderr)
    assert "onnxruntime:" not in proc.stderr, proc.stderr


def test_onnxruntime_log_lines_reach_the_hybrid_trt_logger_at_debug():
    import onnxruntime
    if not hasattr(onnxruntime, "set_default_logger_callback"):
        import pytest
        pytest.skip("onnxruntime < 1.32 has no logger callback; at DEBUG its lines go to its own sink")
    proc = _run_logging_script("debug")
    assert "raised:" in proc.stdout, (proc.stdout, proc.stderr)
    assert "hybrid_trt DEBUG onnxruntime [E] Non-zero status code" in proc.stderr, proc.stderr
    assert "onnxruntime:" not in proc.stderr, proc.stderr


_CPP_BUILDER_SCRIPT = r'''
import torch, hybrid_trt
model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.Conv2d(4, 4, 3)).eval()
fast = torch.compile(model, backend="hybrid_trt", dynamic=True, options={"force_inductor_ops": ["aten.relu.default"]})
with torch.no_grad():
    for batch in (1, 2):
        x = torch.randn(batch, 3, 12, 12)
        assert torch.allclose(fast(x), model(x), atol=1e-5)
print("matched")
'''


def test_torch_cpp_builder_warning_stays_off_stderr():
    """Inductor's CPU code generation imports torch's C++ builder, which warns at import on a machine with CUDA_HOME
    but no CUDA runtime ("No CUDA runtime is found, using CUDA_HOME=...", this CPU machine): a fresh process
    compiling a graph Inductor generates C++ for shows none of it."""
    import subprocess
    import sys
    proc = subprocess.run([sys.executable, "-c", _CPP_BUILDER_SCRIPT], capture_output=True, text=True, timeout=300,
                          cwd=str(__import__("pathlib").Path(__file__).parents[1]))
    assert "matched" in proc.stdout, (proc.stdout, proc.stderr[-3000:])
    assert "No CUDA runtime is found" not in proc.stderr, proc.stderr[-3000:]


@pytest.mark.parametrize("call,shape,dtype,declined", [
    (lambda x: x.topk(100, dim=-1), (2, 5000), torch.float32, None),
    (lambda x: x.topk(4000, dim=-1), (2, 5000), torch.float32, "at most 3840"),
    (lambda x: x.sort(dim=-1), (2, 3840), torch.float32, None),
    (lambda x: x.sort(dim=1, descending=True), (2, 3841), torch.float16, "at most 3840"),
    (lambda x: torch.sort(x, stable=True, dim=0), (5000, 2), torch.float32, "at most 3840"),
    (lambda x: x.topk(2, dim=0), (3, 2, 2, 2, 2), torch.float32, "one of the last four"),
    (lambda x: x.topk(2, dim=1), (3, 2, 2, 2, 2), torch.float32, None),
    (lambda x: x.sort(), (8,), torch.uint8, "no uint8"),
], ids=["topk100", "topk4000", "sort3840", "sort3841", "stable5000", "axis0_of_5d", "axis1_of_5d", "uint8"])
def test_tensorrt_declines_what_its_topk_layer_cannot_take(call, shape, dtype, declined):
    """TensorRT's TopK layer (the topk and sort lowerings) takes k <= 3840 along one of the last four axes, and
    no float64, int8, uint8 or bool data: past that, the partition's build would fail on the device. The check is
    TensorRT's documented limits, run on the traced node (TensorRT itself cannot run on these machines)."""
    from torch.fx.experimental.proxy_tensor import make_fx
    gm = make_fx(call, tracing_mode="fake")(torch.zeros(shape, dtype=dtype))
    (node,) = [n for n in gm.graph.nodes if n.op == "call_function" and n.target.__name__.split(".")[0] in ("sort", "topk")]
    reason = get_delegate("tensorrt").node_unsupported_reason(node)
    if declined is None:
        assert reason is None, reason
    else:
        assert reason is not None and declined in reason, reason


def test_tensorrt_declines_roi_align_for_onnx_runtime():
    """TensorRT's ONNX parser imports RoiAlign only as its ROIAlign_TRT plugin, which hybrid_trt does not register:
    the tensorrt delegate declines roi_align on the traced node (so ONNX Runtime, next in order, claims it) and
    takes the convolution beside it."""
    torchvision = pytest.importorskip("torchvision")
    from torch.fx.experimental.proxy_tensor import make_fx
    gm = make_fx(lambda x, boxes: torchvision.ops.roi_align(torch.relu(x), boxes, 2), tracing_mode="fake")(
        torch.zeros(1, 2, 8, 8), torch.zeros(3, 5))
    reasons = {str(n.target): get_delegate("tensorrt").node_unsupported_reason(n)
               for n in gm.graph.nodes if n.op == "call_function"}
    assert "ROIAlign_TRT" in (reasons["torchvision.roi_align.default"] or ""), reasons
    assert reasons["aten.relu.default"] is None, reasons


def _range_model():
    """Concat of x with itself along a dimension named N: the output's size (2N) is known only at run time."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3])
    out = helper.make_tensor_value_info("out", TensorProto.FLOAT, ["M", 3])
    graph = helper.make_graph([helper.make_node("Concat", ["x", "x"], ["out"], axis=0)], "g", [x], [out])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_range_engine_learns_output_shapes_once_per_input_shape_into_torch_outputs(monkeypatch):
    """The CUDA path of an engine for a range of shapes (run here through the CPU provider's IO binding, which is
    the same API): the first call of each input shape learns the output shapes from a run with ONNX Runtime's own
    outputs, every call returns outputs torch allocated (CUDA graph trees accept only those), and a shape seen
    before runs once."""
    import onnxruntime as ort
    from hybrid_trt.delegates.onnxruntime_delegate import OnnxRuntimeEngine
    session = ort.InferenceSession(_range_model().SerializeToString(), providers=["CPUExecutionProvider"])
    engine = OnnxRuntimeEngine(session, [torch.empty(4, 3)], torch.device("cpu"))
    engine._cpu_call, engine._ort_outputs, engine._shapes_by_input = None, False, {}  # as on CUDA
    runs = []
    real_run = session.run_with_iobinding
    monkeypatch.setattr(session, "run_with_iobinding", lambda *a: runs.append(1) or real_run(*a), raising=False)
    engine._session = session
    allocated = []
    real_empty = torch.empty
    monkeypatch.setattr(torch, "empty", lambda *a, **k: allocated.append(a) or real_empty(*a, **k))
    for n, expected_runs in ((2, 2), (5, 2), (2, 1)):
        runs.clear()
        x = torch.randn(n, 3)
        (out,) = engine([x])
        assert torch.equal(out, torch.cat([x, x])) and out.shape == (2 * n, 3)
        assert len(runs) == expected_runs, (n, runs)
        assert allocated and tuple(allocated[-1][0]) == (2 * n, 3)  # the output is torch's
    assert engine._shapes_by_input == {((2, 3),): [(4, 3)], ((5, 3),): [(10, 3)]}


class _FakeTrtContext:
    """An execution context that checks, at each execution, that the addresses bound are the calling thread's
    (a pause between binding and executing lets another thread bind in between, were calls not serialised)."""

    def __init__(self):
        self.bound, self.bad = {}, []

    def set_tensor_address(self, name, ptr):
        import time
        self.bound[name] = (threading.get_ident(), ptr)
        time.sleep(0.0005)

    def execute_async_v3(self, stream_handle):
        if any(thread != threading.get_ident() for thread, _ptr in self.bound.values()):
            self.bad.append(dict(self.bound))
        return True


class _FakeStream:
    def __init__(self, handle):
        self.cuda_stream, self.waited = handle, []

    def wait_stream(self, other):
        self.waited.append(other)


def _fake_trt_engine(monkeypatch):
    import types
    from hybrid_trt.delegates import tensorrt_delegate
    io = types.SimpleNamespace(INPUT="in", OUTPUT="out")
    monkeypatch.setattr(tensorrt_delegate, "_trt", lambda: types.SimpleNamespace(TensorIOMode=io))
    context = _FakeTrtContext()
    engine = types.SimpleNamespace(
        num_io_tensors=2, create_execution_context=lambda: context, get_tensor_name=["x", "y"].__getitem__,
        get_tensor_mode=lambda n: "in" if n == "x" else "out", get_tensor_shape=lambda n: (4,))
    return tensorrt_delegate.TensorRTEngine(engine, [torch.empty(4)], torch.device("cpu")), context


def test_tensorrt_engine_serialises_calls_from_threads_and_orders_streams(monkeypatch):
    """One execution context serves one execution at a time: two threads' bindings never mix, and a call on
    another stream than the last call's waits for it. TensorRT itself cannot run here: the engine and its context
    are stand-ins with TensorRT's calls, the code between them hybrid_trt's own."""
    engine, context = _fake_trt_engine(monkeypatch)
    streams = {"a": _FakeStream(1), "b": _FakeStream(2)}
    current = threading.local()
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: streams[getattr(current, "s", "a")])
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)

    def calls(n):
        for _ in range(n):
            (out,) = engine([torch.randn(4)])
            assert out.shape == (4,)
    threads = [threading.Thread(target=calls, args=(40,)) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert context.bad == []
    assert streams["a"].waited == []  # one stream: nothing to wait for
    current.s = "b"
    engine([torch.randn(4)])
    current.s = "a"
    engine([torch.randn(4)])
    assert streams["b"].waited == [streams["a"]] and streams["a"].waited == [streams["b"]]


def test_a_slow_engine_build_says_it_is_still_running_and_a_fast_one_says_nothing(monkeypatch, caplog):
    """A TensorRT build takes minutes: past a threshold the build says, at the default log level, that it is still
    running, and when it is done. Thresholds lowered here; the build is ONNX Runtime's, slowed by a sleep."""
    import logging
    import time
    import hybrid_trt.log as htlog
    delegate = type(get_delegate("onnxruntime"))
    build = delegate.build
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4)).eval()
    x = torch.randn(2, 8)

    def compiled_messages():
        caplog.clear()
        torch._dynamo.reset()
        with caplog.at_level(logging.WARNING, logger="hybrid_trt"), torch.no_grad():
            out = torch.compile(model, backend="hybrid_trt", options={"min_block_size": 1, "cache": False})(x)
        torch.testing.assert_close(out, model(x))
        return [r.getMessage() for r in caplog.records if r.name == "hybrid_trt"]

    monkeypatch.setattr(htlog, "SLOW_NOTICE_AFTER_S", 5.0)  # far above this tiny build, even on a loaded machine
    assert compiled_messages() == []  # a build under the threshold: nothing
    monkeypatch.setattr(htlog, "SLOW_NOTICE_AFTER_S", 0.2)
    monkeypatch.setattr(htlog, "SLOW_NOTICE_EVERY_S", 0.2)
    monkeypatch.setattr(delegate, "build", lambda self, *a, **k: (time.sleep(0.7), build(self, *a, **k))[1])
    messages = compiled_messages()
    running = [m for m in messages if "still running after" in m]
    assert len(running) >= 2 and all("building the onnxruntime engine for [2x8]" in m for m in running), messages
    assert messages[-1].startswith(running[0].split(": still running")[0]) and ": done in" in messages[-1], messages


def test_a_slow_graph_compile_says_it_is_still_running(monkeypatch, caplog):
    """A whole graph's compile (a detector's takes minutes on a CPU) says it is still running past its own, later
    threshold, naming the graph, even when no single engine build is slow enough to speak. Thresholds lowered here;
    the compile is slowed by a sleep in the engine build."""
    import logging
    import time
    import hybrid_trt.log as htlog
    delegate = type(get_delegate("onnxruntime"))
    build = delegate.build
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4)).eval()
    x = torch.randn(2, 8)
    monkeypatch.setattr(htlog, "SLOW_NOTICE_AFTER_S", 60.0)  # no engine build speaks
    monkeypatch.setattr(htlog, "GRAPH_NOTICE_AFTER_S", 0.2)
    monkeypatch.setattr(htlog, "SLOW_NOTICE_EVERY_S", 0.2)
    monkeypatch.setattr(delegate, "build", lambda self, *a, **k: (time.sleep(0.7), build(self, *a, **k))[1])
    torch._dynamo.reset()
    with caplog.at_level(logging.WARNING, logger="hybrid_trt"), torch.no_grad():
        out = torch.compile(model, backend="hybrid_trt", options={"min_block_size": 1, "cache": False})(x)
    torch.testing.assert_close(out, model(x))
    messages = [r.getMessage() for r in caplog.records if r.name == "hybrid_trt"]
    running = [m for m in messages if "still running after" in m]
    assert running and all(m.startswith("hybrid_trt: compiling graph ") for m in running), messages
    assert "nodes): done in" in messages[-1], messages


def test_builds_share_the_delegates_build_cache_through_the_store(monkeypatch, tmp_path):
    """A delegate that names a shared build cache (TensorRT's timing cache: ``build_cache_name``) gets, at every
    build, the bytes the previous build left in the store, and its engine's extended cache is stored again: a
    fresh process (a new store object on the same directory) reads it. ONNX Runtime stands in for TensorRT, which
    cannot run here; the code between the store and the build is hybrid_trt's own."""
    from hybrid_trt.engines import EngineStore
    delegate = type(get_delegate("onnxruntime"))
    build, seen = delegate.build, []

    def extending_build(self, *a, **k):
        if "build_cache" not in k:
            seen.append("not passed")
            return build(self, *a, **k)
        shared = k.pop("build_cache")
        seen.append(shared)
        engine = build(self, *a, **k)
        engine.build_cache = (shared or b"") + b"+"
        return engine
    monkeypatch.setattr(delegate, "build_cache_name", lambda self, device, options: "test-timing-cache")
    monkeypatch.setattr(delegate, "build", extending_build)
    opts = {"min_block_size": 1, "cache_dir": str(tmp_path)}
    with torch.no_grad():
        for width in (8, 12):  # two models: two engines, built one after the other
            model = torch.nn.Sequential(torch.nn.Linear(width, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4)).eval()
            x = torch.randn(2, width)
            torch._dynamo.reset()
            torch.testing.assert_close(torch.compile(model, backend="hybrid_trt", options=opts)(x), model(x))
    assert seen == [None, b"+"]
    assert EngineStore(tmp_path).read_shared("test-timing-cache") == b"++"
    seen.clear()
    with torch.no_grad():  # without a store (cache off) there is nothing to share: no cache is passed
        torch._dynamo.reset()
        torch.compile(model, backend="hybrid_trt", options={**opts, "cache": False})(x)
    assert seen == ["not passed"]


class _FakeTimingConfig:
    """TensorRT's IBuilderConfig, as far as the timing cache goes (TensorRT cannot run here)."""

    def __init__(self, accepts=True, raises=False):
        self.accepts, self.raises, self.attached = accepts, raises, None

    def create_timing_cache(self, blob):
        if self.raises and blob:
            raise RuntimeError("bad timing cache")
        return ("cache", bytes(blob))

    def set_timing_cache(self, cache, ignore_mismatch):
        assert ignore_mismatch is False  # timings of another device are refused, never used
        if cache[1] and not self.accepts:
            return False
        self.attached = cache
        return True


@pytest.mark.parametrize("case, attached", [("none", b""), ("accepted", b"old timings"),
                                            ("refused", b""), ("unreadable", b"")])
def test_tensorrt_builds_start_from_the_shared_timing_cache_when_tensorrt_takes_it(case, attached):
    from hybrid_trt.delegates.tensorrt_delegate import _attach_timing_cache
    config = _FakeTimingConfig(accepts=case != "refused", raises=case == "unreadable")
    _attach_timing_cache(config, None if case == "none" else b"old timings")
    assert config.attached == ("cache", attached)


def test_tensorrt_shared_timing_cache_is_named_by_version_and_gpu(monkeypatch):
    import types
    tensorrt = get_delegate("tensorrt")
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda device: types.SimpleNamespace(name="NVIDIA H200 (MIG 1g.18gb)", major=9, minor=0))
    monkeypatch.setattr(type(tensorrt), "library_version", lambda self: "10.13.0+cuda13")
    name = tensorrt.build_cache_name(torch.device("cuda:0"), {})
    assert name == "tensorrt-timing-10.13.0-cuda13-sm90-NVIDIA-H200--MIG-1g.18gb-"
    from hybrid_trt.engines.store import _KEY
    assert _KEY.fullmatch(name)  # a name the store takes
