"""CUDA graphs for the stitched callable (hybrid_trt/cudagraphs.py): ``mode="reduce-overhead"`` and
``options={"cuda_graphs": True}``.

CPU parts run everywhere: option and mode handling, capture-safety declarations, the uncapturable op's tag, the
report, and that data-dependent parts (the LiDAR example) are named as outside any graph. The CUDA parts run on
a GPU machine with onnxruntime-gpu (CUDA provider): replay after new inputs, shape changes, two models
alternating, a user stream, output lifetime as Inductor's ``reduce-overhead`` has it, segments around a delegate
that is not capture-safe, and every model matching eager with graphs on.
"""
import logging

import pytest
import torch

import hybrid_trt
from hybrid_trt import cudagraphs
from hybrid_trt.delegates import get_delegate
from hybrid_trt.engines.op import delegate as delegate_op
from hybrid_trt.engines.runtime import PartitionRuntime
from hybrid_trt.report import PartitionReport

from _helpers import assert_close
from examples.models import build


def _reports_since(start: int) -> list:
    """Reports of the graphs compiled since ``len(hybrid_trt.reports())`` was ``start``: a test reads its own,
    whatever ran before it in the process (tests run in any order, several per worker under pytest-xdist)."""
    return hybrid_trt.reports()[start:]


def _small_resnet():
    from examples.models import _randomize_bn, resnet18
    return _randomize_bn(resnet18(num_classes=10, width=8)).eval()


# ---------------------------------------------------------------------------------------------- options, modes


def test_reduce_overhead_mode_sets_cuda_graphs():
    assert cudagraphs.options_with_mode(None, "reduce-overhead") == {"cuda_graphs": True}
    assert cudagraphs.options_with_mode({"min_block_size": 2}, "reduce-overhead") == {
        "min_block_size": 2, "cuda_graphs": True}
    assert cudagraphs.options_with_mode(hybrid_trt.Options(), "reduce-overhead").cuda_graphs is True
    assert cudagraphs.options_with_mode({"x": 1}, None) == {"x": 1}
    assert cudagraphs.options_with_mode({"x": 1}, "default") == {"x": 1}


def test_max_autotune_modes_are_inductors_autotuning_with_and_without_graphs():
    assert cudagraphs.options_with_mode(None, "max-autotune") == {"cuda_graphs": True, "max_autotune": True}
    assert cudagraphs.options_with_mode({"x": 1}, "max-autotune-no-cudagraphs") == {"x": 1, "max_autotune": True}
    opts = cudagraphs.options_with_mode(hybrid_trt.Options(), "max-autotune-no-cudagraphs")
    assert opts.max_autotune is True and opts.cuda_graphs is False


def test_an_unknown_mode_is_rejected_naming_the_valid_ones():
    with pytest.raises(ValueError, match="mode='turbo'.*max-autotune-no-cudagraphs"):
        cudagraphs.options_with_mode(None, "turbo")


@pytest.mark.parametrize("mode, key", [("reduce-overhead", "cuda_graphs"), ("max-autotune", "cuda_graphs"),
                                       ("max-autotune-no-cudagraphs", "max_autotune")])
def test_mode_contradicting_options_is_an_error(mode, key):
    with pytest.raises(ValueError, match=f"{key}=False"):
        cudagraphs.options_with_mode({key: False}, mode)


def test_cuda_graphs_option_validated_and_read_from_environment():
    assert hybrid_trt.make_options({"cuda_graphs": True}).cuda_graphs is True
    assert hybrid_trt.make_options({}, environ={"HYBRID_TRT_CUDA_GRAPHS": "1"}).cuda_graphs is True
    assert hybrid_trt.make_options({}).cuda_graphs is False
    with pytest.raises(ValueError, match="cuda_graphs"):
        hybrid_trt.make_options({"cuda_graphs": "sometimes"})


def test_inductor_config_only_when_asked():
    assert cudagraphs.inductor_config(hybrid_trt.make_options({}).inductor_cuda_graphs) == {}
    patch = cudagraphs.inductor_config(hybrid_trt.make_options({"cuda_graphs": True}).inductor_cuda_graphs)
    assert patch["triton.cudagraphs"] is True
    assert patch.get("graph_partition", True) is True


def test_torch_compile_mode_reaches_the_backend_and_is_reported():
    """torch.compile passes mode= to the backend (it used to be rejected); on CPU nothing is captured and the
    report says why. The compiled model still matches eager."""
    model = _small_resnet()
    x = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        expected = model(x)
        got = torch.compile(model, backend="hybrid_trt", mode="reduce-overhead")(x)
    assert_close(got, expected)
    record = hybrid_trt.last_report().cuda_graphs
    assert record is not None and record.status == "not captured" and record.segments == 0
    assert any("on the CPU" in why for why in record.reasons), record.reasons
    assert "CUDA graphs: not captured" in hybrid_trt.last_report().table()


def test_no_cuda_graph_record_without_the_option():
    model, before = _small_resnet(), len(hybrid_trt.reports())
    with torch.no_grad():
        torch.compile(model, backend="hybrid_trt")(torch.randn(1, 3, 32, 32))
    assert len(hybrid_trt.reports()) > before  # this compile's report, not an earlier test's
    assert hybrid_trt.last_report().cuda_graphs is None


# ---------------------------------------------------------------------------------------------- capture safety


def test_capture_safety_declarations():
    ort = get_delegate("onnxruntime")
    cuda, cpu = torch.device("cuda", 0), torch.device("cpu")
    opts = {"provider": "auto", "threads": 1, "tf32_convolutions": False, "tf32_matmul": False}
    assert ort.capture_unsafe_reason(cuda, opts) is None  # CUDA provider on its stream joined by events
    assert "CPU" in ort.capture_unsafe_reason(cpu, opts)
    assert "CPU" in ort.capture_unsafe_reason(cuda, {**opts, "provider": "cpu"})
    assert "TensorrtExecutionProvider" in ort.capture_unsafe_reason(cuda, {**opts, "provider": "tensorrt"})
    trt = get_delegate("tensorrt")
    assert trt.capture_unsafe_reason(cuda, {}) is None
    assert trt.capture_unsafe_reason(cpu, {}) is not None

    class Undeclared(type(ort).__mro__[1]):  # the Delegate base class, nothing overridden
        name = "undeclared"

        def unavailable_reason(self):
            return None

        def build(self, *a, **k):
            raise NotImplementedError
    assert "does not declare" in Undeclared().capture_unsafe_reason(cuda, {})


def test_uncapturable_op_carries_the_cudagraph_unsafe_tag():
    from torch._inductor.utils import is_cudagraph_unsafe_fx_node
    assert torch.Tag.cudagraph_unsafe in cudagraphs.delegate_uncapturable.tags
    assert torch.Tag.cudagraph_unsafe not in delegate_op.tags
    g = torch.fx.Graph()
    x = g.placeholder("x")
    safe = g.call_function(delegate_op, ("k1", [x], []))
    unsafe = g.call_function(cudagraphs.delegate_uncapturable, ("k2", [x], []))
    assert is_cudagraph_unsafe_fx_node(unsafe) and not is_cudagraph_unsafe_fx_node(safe)


def test_plan_rewrites_only_uncapturable_partitions():
    g = torch.fx.Graph()
    x = g.placeholder("x")
    a = g.call_function(delegate_op, ("keep", [x], []))
    b = g.call_function(delegate_op, ("move", [x], []))
    g.output((a, b))
    gm = torch.fx.GraphModule(torch.nn.Module(), g)
    plan = cudagraphs.CapturePlan(enabled=True, uncapturable={"move": "declared unsafe"})
    plan.apply(gm)
    targets = {n.args[0]: n.target for n in gm.graph.nodes if n.op == "call_function"}
    assert targets == {"keep": delegate_op, "move": cudagraphs.delegate_uncapturable}
    reasons = list(cudagraphs.blockers(gm, plan))
    assert any("declared unsafe" in r for r in reasons), reasons


def test_cpu_partitions_are_planned_outside_graphs_and_run_correctly():
    """With the option on and a CPU model, every delegated partition is called through the uncapturable op (the
    ONNX Runtime CPU provider declares itself unsafe), and the model still matches eager."""
    model, x = build("detector")
    with torch.no_grad():
        expected = model(x)
        compiled = torch.compile(model, backend="hybrid_trt", options={"cuda_graphs": True})
        got = compiled(x)
        got_again = compiled(x)
    assert_close(got, expected, rtol=1e-3, atol=1e-3)
    assert_close(got_again, expected, rtol=1e-3, atol=1e-3)
    report = hybrid_trt.last_report()
    delegated = [p for p in report.partitions if p.status == "delegated"]
    assert delegated, report.table()
    for p in delegated:
        assert any("outside CUDA graphs" in e and "CPU" in e for e in p.events), p.events
    assert report.cuda_graphs.status == "not captured"


def test_reduce_overhead_on_a_cpu_model_says_once_that_nothing_is_captured(hybrid_logs):
    """mode="reduce-overhead" on a CPU model captures nothing: one warning saying so (asked for and not done is
    no silent fallback), none about CUDA graphs being experimental (it is about CUDA partitions between captured
    segments), and the report's reasons are whole sentences (Inductor's 'multiple devices: ' names no device for
    a graph whose every op is delegated)."""
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.Conv2d(8, 8, 3)).eval()
    x = torch.randn(1, 3, 16, 16)
    with torch.no_grad():
        assert_close(torch.compile(model, backend="hybrid_trt", mode="reduce-overhead")(x), model(x))
    assert not [r for r in hybrid_logs.records if "experimental" in r.getMessage()], hybrid_logs.text
    said = [r for r in hybrid_logs.records if r.levelno == logging.WARNING and "computes on the CPU" in r.getMessage()]
    assert len(said) == 1 and "runs uncaptured" in said[0].getMessage(), hybrid_logs.text
    # it names every way graphs are asked for (it named reduce-overhead alone, to a user of max-autotune)
    assert "mode='reduce-overhead' or 'max-autotune', or the option cuda_graphs" in said[0].getMessage()
    report = hybrid_trt.last_report()
    assert report.cuda_graphs.status == "not captured"
    assert report.cuda_graphs.reasons and not [r for r in report.cuda_graphs.reasons if r.rstrip().endswith(":")], \
        report.cuda_graphs.reasons
    # Compiled again, Inductor's cache serves the graph (nothing compiled to inspect): the same warning and record
    torch._dynamo.reset()
    with torch.no_grad():
        assert_close(torch.compile(model, backend="hybrid_trt", mode="reduce-overhead")(x), model(x))
    report = hybrid_trt.last_report()
    assert report.from_inductor_cache, report.table()
    assert report.cuda_graphs.status == "not captured" and "computes on the CPU" in report.cuda_graphs.reasons[0]
    said = [r for r in hybrid_logs.records if r.levelno == logging.WARNING and "computes on the CPU" in r.getMessage()]
    assert len(said) == 2, hybrid_logs.text


# ---------------------------------------------------------------------------------------------- LiDAR example


def test_lidar_data_dependent_parts_named_outside_graphs(monkeypatch):
    """Data-dependent parts are reported, and Inductor is told which ops make data-dependent sizes, so that no
    tensor sized by them lands in a captured segment (its graph partitioning otherwise put one there)."""
    from examples import lidar_detector
    model = lidar_detector.build_model("small")
    feats, coords = lidar_detector.make_inputs("small", seed=0)
    start = len(hybrid_trt.reports())
    splits = []
    real_split = cudagraphs._data_dependent_split
    monkeypatch.setattr(cudagraphs, "_data_dependent_split", lambda gm: splits.append(real_split(gm)) or splits[-1])
    monkeypatch.setenv("TORCHINDUCTOR_FX_GRAPH_CACHE", "0")  # compile, so that the split is computed
    with torch.no_grad():
        expected = model(feats, coords)
        compiled = torch.compile(model, backend="hybrid_trt", fullgraph=True, options={"cuda_graphs": True})
        got = compiled(feats, coords)
    lidar_detector.compare_detections(expected, got, atol=1e-4, rtol=1e-4)
    records = [r.cuda_graphs for r in _reports_since(start) if r.cuda_graphs is not None]
    assert records and all(r.status in ("not captured", "unknown (compiled graph served by Inductor's cache)")
                           or "segment" in r.status for r in records)
    reasons = [why for r in records for why in r.reasons]
    assert any("data-dependent size" in why for why in reasons), reasons
    if hasattr(torch._inductor.config, "cudagraph_unsafe_unbacked_ops"):
        named = {op for patch in splits for op in patch.get("cudagraph_unsafe_unbacked_ops", ())}
        assert any(op.startswith("hybrid_trt::sparse_rulebook") for op in named), splits


# ---------------------------------------------------------------------------------------------- CUDA


def _ort_cuda() -> bool:
    try:
        import onnxruntime
    except ImportError:
        return False
    return "CUDAExecutionProvider" in onnxruntime.get_available_providers()


cuda_only = pytest.mark.skipif(not (torch.cuda.is_available() and _ort_cuda()),
                               reason="needs a CUDA device and onnxruntime-gpu's CUDA provider")


def _cuda_model(name="resnet18", dtype=torch.float32, batch=1):
    if name == "resnet18":
        model, x = _small_resnet(), torch.randn(batch, 3, 64, 64)
    else:
        model, x = build(name)
        x = x.expand(batch, *x.shape[1:]).contiguous() if batch != x.shape[0] else x
    return model.cuda().to(dtype), x.cuda().to(dtype)


def _tol(dtype):
    return (1e-3, 1e-3) if dtype == torch.float32 else (2e-2, 2e-2)


def _check(name, got, expected, dtype, what):
    """Outputs against eager. The detector's top-k may order near-equal peaks differently when convolutions
    round differently (ONNX Runtime's kernels vs cuDNN's), so its scores are compared sorted and its boxes and
    classes are left out, as benchmarks/bench_gpu.py does."""
    if name == "detector":
        got, expected = got[1].sort(-1).values, expected[1].sort(-1).values
    assert_close(got, expected, *_tol(dtype), what=what)


def _count_runs(monkeypatch):
    calls = []
    original = PartitionRuntime.run

    def counting(self, inputs, sizes):
        calls.append(self.key)
        return original(self, inputs, sizes)
    monkeypatch.setattr(PartitionRuntime, "run", counting)
    return calls


class _ProbedRuntime:
    """What the compile-time probe needs of a PartitionRuntime: a CUDA device, ``run``, and a report."""

    def __init__(self, run):
        self.device = torch.device("cuda", torch.cuda.current_device())
        self.report = PartitionReport(index=0, delegate="test", op_count=1, ops={}, input_shapes=[],
                                      output_shapes=[])
        self.run = run


def _enqueue_host_function():
    """``x -> x + 1`` that also enqueues a CPU callback on the current stream (cuLaunchHostFunc), as ONNX
    Runtime's CUDA provider does to release pinned staging buffers after a run. The probe never replays its
    graph, so the callback never runs."""
    import ctypes
    cuda = ctypes.CDLL("libcuda.so.1")
    callback = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(lambda _user: None)

    def run(inputs, sizes):
        out = inputs[0] + 1
        stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
        assert cuda.cuLaunchHostFunc(stream, callback, None) == 0
        return [out]
    run.keep = callback  # the function pointer must outlive every launch
    return run


@cuda_only
def test_probe_refuses_an_engine_whose_capture_holds_a_host_function():
    """A capture that succeeds is not enough: a host-function node would run again at every replay (ONNX
    Runtime's deferred release of pinned buffers then frees the same memory again, and the process aborts at
    teardown). The probe inspects the captured graph and keeps such an engine outside CUDA graphs."""
    meta = torch.empty(4, device="cuda")
    plain = _ProbedRuntime(lambda inputs, sizes: [inputs[0] + 1])
    assert cudagraphs._probe(plain, [meta]) == cudagraphs.ProbeResult(None)  # replays timed only when asked
    cleared = cudagraphs._probe(plain, [meta], time_replay=True)
    assert cleared.reason is None and 0 < cleared.replay_ms < 1.0, cleared  # one tiny kernel, replayed
    with_host = _ProbedRuntime(_enqueue_host_function())
    refused = cudagraphs._probe(with_host, [meta], time_replay=True)
    assert refused.reason is not None and "host-function node" in refused.reason, refused
    assert refused.replay_ms is None


@cuda_only
def test_graph_node_types_read_a_captured_graph():
    graph = cudagraphs._inspectable_graph()
    x = torch.zeros(8, device="cuda")
    with torch.cuda.graph(graph):
        y = x * 2 + 1
    types = cudagraphs.graph_node_types(graph.raw_cuda_graph())
    assert types.get(0, 0) >= 1 and not types.get(cudagraphs._HOST_NODE), types  # kernels, no host node
    del graph, y


@cuda_only
def test_replay_after_new_inputs_runs_no_python_delegate_code(monkeypatch, no_tf32):
    """The fully delegated model is captured whole: after the warm-up and the recording call, replays do not
    enter the delegate's Python code at all, and each replay computes on the new input data."""
    model, x = _cuda_model()
    with torch.no_grad():
        compiled = torch.compile(model, backend="hybrid_trt", mode="reduce-overhead")
        compiled(x)
        record = hybrid_trt.last_report().cuda_graphs
        assert record.status == "captured whole", hybrid_trt.last_report().table()
        calls = _count_runs(monkeypatch)
        compiled(x)  # recording (or, on some versions, a second warm-up)
        compiled(x)
        before = len(calls)
        for seed in range(4):
            xi = torch.randn(x.shape, generator=torch.Generator().manual_seed(seed)).cuda()
            got = compiled(xi).clone()
            assert_close(got, model(xi), *_tol(torch.float32), what=f"replay {seed}")
        assert len(calls) == before, "replays called the delegate in Python: the graph did not capture it"


@cuda_only
def test_reduce_overhead_measures_placement_by_default(monkeypatch, no_tf32):
    """``mode="reduce-overhead"`` with no placement given times every GPU partition (replay against Inductor's
    device time) and keeps the faster, with the timings in the report; the result matches eager either way."""
    monkeypatch.delenv("HYBRID_TRT_PLACEMENT")
    model, x = _cuda_model()
    with torch.no_grad():
        expected = model(x)
        compiled = torch.compile(model, backend="hybrid_trt", mode="reduce-overhead")
        outs = [compiled(x).clone() for _ in range(3)]
    report = hybrid_trt.last_report()
    assert report.partitions, report.table()
    for p in report.partitions:
        assert (p.placement or "").startswith("measured"), report.table()
        assert p.status in ("delegated", "placed on Inductor"), report.table()
    for k, out in enumerate(outs):
        assert_close(out, expected, *_tol(torch.float32), what=f"call {k}")


@cuda_only
@pytest.mark.parametrize("dynamic", [False, True])
def test_shape_change(dynamic, no_tf32):
    model, _ = _cuda_model()
    with torch.no_grad():
        compiled = torch.compile(model, backend="hybrid_trt", mode="reduce-overhead", dynamic=dynamic)
        for batch in (2, 4, 2, 4, 3, 2):
            x = torch.randn(batch, 3, 64, 64, device="cuda")
            assert_close(compiled(x).clone(), model(x), *_tol(torch.float32), what=f"batch {batch}")


@cuda_only
def test_shapes_past_the_engine_bound_run_compiled_under_graphs(no_tf32):
    """Past ``max_engines_per_partition`` a new shape's first call compiles the Inductor fallback inside the
    stitched graph's run; under CUDA graphs that call is a cudagraph-tree warm-up, and later calls of the shape
    replay what it recorded. Every shape still matches eager, and the bound is reported once."""
    model, _ = _cuda_model()
    with torch.no_grad():
        compiled = torch.compile(model, backend="hybrid_trt", dynamic=True, options={
            "cuda_graphs": True, "max_engines_per_partition": 1, "placement": "delegate"})
        for step, batch in enumerate((2, 3, 4, 3, 2, 4, 5)):
            x = torch.randn(batch, 3, 64, 64, device="cuda")
            assert_close(compiled(x).clone(), model(x), *_tol(torch.float32), what=f"step {step}, batch {batch}")
    report = hybrid_trt.last_report()
    events = [e for p in report.partitions for e in p.events if "engine bound 1 reached" in e]
    delegated = [p for p in report.partitions if p.status == "delegated" and p.engines]
    assert delegated and all(len(p.engines) == 1 for p in delegated), report.table()
    assert len(events) == len(delegated), report.table()


@cuda_only
def test_bounded_dimension_one_range_engine_under_graphs(no_tf32):
    """``mark_dynamic(x, 0, min=2, max=8)`` under ``reduce-overhead``: every delegated partition holds one range
    engine for [1..8] (the ONNX Runtime session is shared by every size), each size is captured and replayed,
    and every call matches eager, sizes revisited included."""
    model, _ = _cuda_model()
    start = len(hybrid_trt.reports())
    with torch.no_grad():
        compiled = torch.compile(model, backend="hybrid_trt", options={"cuda_graphs": True, "placement": "delegate"})
        for step, batch in enumerate((2, 5, 3, 8, 2, 5)):
            x = torch.randn(batch, 3, 64, 64, device="cuda")
            if step == 0:
                torch._dynamo.mark_dynamic(x, 0, min=2, max=8)
            assert_close(compiled(x).clone(), model(x), *_tol(torch.float32), what=f"step {step}, batch {batch}")
    reports = _reports_since(start)
    delegated = [p for r in reports for p in r.partitions if p.status == "delegated"]
    assert delegated, [r.table() for r in reports]
    assert all([e.signature.split("x")[0] for e in p.engines] == ["range [2..8]"] for p in delegated), \
        [r.table() for r in reports]


@cuda_only
def test_two_compiled_models_alternating(no_tf32):
    two_models_alternating(lambda m: torch.compile(m, backend="hybrid_trt", mode="reduce-overhead"))


def two_models_alternating(compile_model):
    """ResNet-18 and the detector, each compiled by ``compile_model``, called in turn on new inputs."""
    a, xa = _cuda_model("resnet18")
    b, xb = _cuda_model("detector")
    with torch.no_grad():
        ca, cb = compile_model(a), compile_model(b)
        for step in range(5):
            xa_i, xb_i = xa + step, xb * (1 + 0.1 * step)
            ya = ca(xa_i).clone()
            yb = tuple(t.clone() for t in cb(xb_i))
            _check("resnet18", ya, a(xa_i), torch.float32, f"model a, step {step}")
            _check("detector", yb, b(xb_i), torch.float32, f"model b, step {step}")


@cuda_only
def test_user_stream(no_tf32):
    model, x = _cuda_model()
    stream = torch.cuda.Stream()
    with torch.no_grad():
        compiled = torch.compile(model, backend="hybrid_trt", mode="reduce-overhead")
        expected = model(x)
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            outs = [compiled(x + i).clone() for i in range(4)]
        torch.cuda.current_stream().wait_stream(stream)
        for i, out in enumerate(outs):
            assert_close(out, model(x + i), *_tol(torch.float32), what=f"call {i} on a user stream")
        assert_close(compiled(x).clone(), expected, *_tol(torch.float32), what="back on the default stream")


def _kept_output_behaviour(fn, eager, x1, x2):
    """What reading the first call's output after a second call gives: ('error', message), ('first', value) when
    it kept the first call's result, ('second', value) when the second call overwrote it in place."""
    first = fn(x1)
    fn(x2)
    try:
        value = first + 0
    except RuntimeError as e:
        return "error", str(e)
    for kind, x in (("first", x1), ("second", x2)):
        if torch.allclose(value, eager(x), *_tol(torch.float32)):
            return kind, value
    return "neither", value


@cuda_only
def test_outputs_kept_across_calls_behave_like_inductor_reduce_overhead(no_tf32):
    """The documented contract is Inductor's: an output lives in the graph's memory until the next replay
    overwrites it (on torch versions that flag it, reading it then raises; on others the read sees the new
    data); ``.clone()`` keeps it. hybrid_trt must behave exactly as ``reduce-overhead`` does in the same process:
    the same of 'error', 'kept the first result', 'overwritten by the second', and never anything else."""
    model, x1 = _cuda_model()
    x2 = x1 * -1.0
    plain_model = _small_resnet().cuda()
    with torch.no_grad():
        hybrid = torch.compile(model, backend="hybrid_trt", mode="reduce-overhead")
        plain = torch.compile(plain_model, mode="reduce-overhead")
        for fn in (hybrid, plain):  # warm up and record, so the next calls are replays
            for _ in range(3):
                fn(x1)
        kind_h, what_h = _kept_output_behaviour(hybrid, model, x1, x2)
        kind_p, what_p = _kept_output_behaviour(plain, plain_model, x1, x2)
        assert kind_p != "neither", what_p
        assert kind_h == kind_p, (kind_h, kind_p, what_h, what_p)
        if kind_h == "error":
            assert "overwritten by a subsequent" in what_h, what_h
        kept = hybrid(x1).clone()
        hybrid(x2)
        assert_close(kept, model(x1), *_tol(torch.float32), what="cloned output")


@cuda_only
def test_partition_not_capture_safe_runs_between_segments(monkeypatch, no_tf32):
    """A delegate that declares itself not capture-safe is called through the uncapturable op: Inductor captures
    the parts around it, the report says so, and results match eager on every call."""
    ort = get_delegate("onnxruntime")
    monkeypatch.setattr(type(ort), "capture_unsafe_reason", lambda self, device, opts: "declared unsafe (test)")
    model, x = _cuda_model("detector")
    with torch.no_grad():
        compiled = torch.compile(model, backend="hybrid_trt", options={"cuda_graphs": True})
        for step in range(4):
            xi = x * (1 + 0.1 * step)
            _check("detector", tuple(t.clone() for t in compiled(xi)), model(xi), torch.float32, f"call {step}")
    report = hybrid_trt.last_report()
    assert any("declared unsafe (test)" in why for why in report.cuda_graphs.reasons), report.table()
    assert report.cuda_graphs.status != "captured whole", report.table()


def _zoo():
    models = [("resnet18", None), ("detector", None)]
    try:
        import torchvision  # noqa: F401
        models += [("mobilenet_v3_large", "torchvision"), ("efficientnet_b0", "torchvision")]
    except ImportError:
        pass
    return models


@cuda_only
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
@pytest.mark.parametrize("name,source", _zoo())
def test_models_match_eager_with_graphs(name, source, dtype, no_tf32):
    if source == "torchvision":
        import torchvision
        torch.manual_seed(0)
        model = getattr(torchvision.models, name)(weights=None).eval().cuda().to(dtype)
        x = torch.randn(2, 3, 224, 224, device="cuda", dtype=dtype)
    else:
        model, x = _cuda_model(name, dtype)
    with torch.no_grad():
        compiled = torch.compile(model, backend="hybrid_trt", mode="reduce-overhead")
        for step in range(3):
            xi = x * (1 + 0.05 * step)
            out = compiled(xi)
            out = tuple(t.clone() for t in out) if isinstance(out, (tuple, list)) else out.clone()
            expected = model(xi)
            expected = tuple(expected) if isinstance(expected, (tuple, list)) else expected
            if source == "torchvision":  # logits of random deep nets: compare relative to their spread
                rtol, atol = _tol(dtype)
                atol = atol * float(expected.float().abs().max().clamp(min=1))
                assert_close(out, expected, rtol, atol, what=f"{name} call {step}")
            else:
                _check(name, out, expected, dtype, f"{name} call {step}")
    assert hybrid_trt.last_report().cuda_graphs.status != "not captured", hybrid_trt.last_report().table()


@cuda_only
def test_lidar_example_on_cuda_with_graphs():
    """Data-dependent parts stay outside the graphs (reported), the rest may be captured, detections match."""
    from examples import lidar_detector
    model = lidar_detector.build_model("small").cuda()
    start = len(hybrid_trt.reports())
    with torch.no_grad():
        compiled = torch.compile(model, backend="hybrid_trt", fullgraph=True, mode="reduce-overhead")
        for seed in range(3):
            feats, coords = lidar_detector.make_inputs("small", device="cuda", seed=seed)
            got = tuple(t.clone() for t in compiled(feats, coords))
            lidar_detector.compare_detections(model(feats, coords), got, atol=1e-3, rtol=1e-3)
    reasons = [why for r in _reports_since(start) if r.cuda_graphs for why in r.cuda_graphs.reasons]
    assert any("data-dependent" in why or "unbacked" in why for why in reasons), reasons
