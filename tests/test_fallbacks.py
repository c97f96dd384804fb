"""Failures complete through Inductor (lowering, build, first call), with a warning naming the partition and
the error and the report saying so; strict raises instead. Also the reasons a graph or op stays with Inductor:
gradients, force_inductor_ops, min_block_size."""
import dataclasses
import json
import logging

import pytest
import torch
import torch.nn as nn

import hybrid_trt
from hybrid_trt.delegates.onnxruntime_delegate import OnnxRuntimeDelegate, OnnxRuntimeEngine
import hybrid_trt.engines.runtime as runtime_module
from hybrid_trt.lowerings.registry import _LOWERINGS

from _helpers import assert_close

aten = torch.ops.aten


class Small(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.fc = nn.Linear(4, 5)

    def forward(self, x):
        y = torch.relu(self.bn(self.conv(x)))
        return self.fc(y.mean(dim=(2, 3))).sigmoid()


def _model():
    return Small().eval(), torch.randn(2, 3, 8, 8)


def _warnings(caplog):
    return [r.getMessage() for r in caplog.records if r.name == "hybrid_trt" and r.levelno >= logging.WARNING]


def _run(options):
    model, x = _model()
    with torch.no_grad():
        expected = model(x)
        compiled = torch.compile(model, backend="hybrid_trt", options=options)
        out = compiled(x)
        again = compiled(x)
    return expected, out, again, hybrid_trt.last_report()


def _raise_lowering(monkeypatch, target, message):
    def broken(ctx, node):
        raise RuntimeError(message)
    monkeypatch.setitem(_LOWERINGS, target, dataclasses.replace(_LOWERINGS[target], fn=broken))


def _cause_chain(e):
    out = []
    while e is not None:
        out.append(e)
        e = e.__cause__ or e.__context__
    return out


def _assert_fell_back(report, caplog, error_text):
    assert len(report.partitions) == 1, report.table()
    part = report.partitions[0]
    assert "fell back" in part.status and any("fell back" in e and error_text in e for e in part.events), \
        (part.status, part.events)
    assert "fell back" in report.table()
    warnings = _warnings(caplog)
    assert any("partition 0" in w and error_text in w for w in warnings), warnings


def test_lowering_failure_falls_back(monkeypatch, hybrid_logs):
    _raise_lowering(monkeypatch, aten.relu.default, "injected lowering bug")
    expected, out, again, report = _run({"min_block_size": 1})
    assert_close(out, expected)
    assert_close(again, expected)
    _assert_fell_back(report, hybrid_logs, "injected lowering bug")
    assert any(op.reason.startswith("build failed") for op in report.inductor_ops), report.table()
    assert report.delegated_op_count == 0


def test_lowering_failure_strict_raises(monkeypatch):
    _raise_lowering(monkeypatch, aten.relu.default, "injected lowering bug")
    model, x = _model()
    compiled = torch.compile(model, backend="hybrid_trt", options={"strict": True})
    with pytest.raises(Exception) as info, torch.no_grad():
        compiled(x)
    assert any("injected lowering bug" in str(e) for e in _cause_chain(info.value))


def _broken_build(self, model, output_metas, device, delegate_options, keep_serialized=False):
    raise RuntimeError("injected build failure")


def test_build_failure_falls_back(monkeypatch, hybrid_logs):
    monkeypatch.setattr(OnnxRuntimeDelegate, "build", _broken_build)
    expected, out, again, report = _run(None)
    assert_close(out, expected)
    assert_close(again, expected)
    _assert_fell_back(report, hybrid_logs, "injected build failure")


def test_build_failure_strict_raises(monkeypatch):
    monkeypatch.setattr(OnnxRuntimeDelegate, "build", _broken_build)
    model, x = _model()
    compiled = torch.compile(model, backend="hybrid_trt", options={"strict": True})
    with pytest.raises(Exception) as info, torch.no_grad():
        compiled(x)
    assert any("injected build failure" in str(e) for e in _cause_chain(info.value))


def _broken_call(self, inputs):
    raise RuntimeError("injected run failure")


def test_first_call_failure_falls_back(monkeypatch, hybrid_logs):
    monkeypatch.setattr(OnnxRuntimeEngine, "__call__", _broken_call)
    expected, out, again, report = _run(None)
    assert_close(out, expected)
    assert_close(again, expected)
    _assert_fell_back(report, hybrid_logs, "injected run failure")
    assert sum("injected run failure" in w for w in _warnings(hybrid_logs)) == 1  # once, not per call


def _failing_from_third_call(monkeypatch):
    real, calls = OnnxRuntimeEngine.__call__, []

    def call(self, inputs):
        calls.append(1)
        if len(calls) >= 3:
            raise RuntimeError("injected failure at a later call")
        return real(self, inputs)
    monkeypatch.setattr(OnnxRuntimeEngine, "__call__", call)


def test_a_later_call_failure_falls_back(monkeypatch, hybrid_logs):
    """An engine that ran fine and then fails on inputs eager runs (a device error, say): until now its error
    reached the caller at every call. That call and every later one run through Inductor, with one warning."""
    _failing_from_third_call(monkeypatch)
    model, x = _model()
    with torch.no_grad():
        expected = model(x)
        compiled = torch.compile(model, backend="hybrid_trt")
        outs = [compiled(x) for _ in range(5)]
    for out in outs:
        assert_close(out, expected)
    report = hybrid_trt.last_report()
    assert [p.status for p in report.partitions] == ["fell back to Inductor"], report.table()
    assert any("a call failed: injected failure at a later call" in e for e in report.partitions[0].events)
    assert sum("injected failure at a later call" in w for w in _warnings(hybrid_logs)) == 1


def test_a_later_call_failure_strict_raises_naming_the_engine(monkeypatch):
    _failing_from_third_call(monkeypatch)
    model, x = _model()
    compiled = torch.compile(model, backend="hybrid_trt", options={"strict": True})
    with torch.no_grad():
        compiled(x), compiled(x)
        with pytest.raises(hybrid_trt.EngineCallFailed, match="its engine failed: injected failure at a later call"):
            compiled(x)


def test_fallback_whose_inductor_compile_fails_runs_eagerly(monkeypatch, hybrid_logs):
    """The partition's own fallback must not fail either: when Inductor cannot compile the partition module at
    the first call, the module runs eagerly (one more warning), and the output still matches eager."""
    monkeypatch.setattr(OnnxRuntimeEngine, "__call__", _broken_call)
    model, x = _model()
    with torch.no_grad():
        expected = model(x)
        compiled = torch.compile(model, backend="hybrid_trt")
        real_compile = torch.compile

        def inductor_fails(fn, *args, **kwargs):
            backend = kwargs.get("backend")  # with its Inductor settings bound (functools.partial)
            if getattr(backend, "func", backend) is not runtime_module._inductor_with_our_decompositions:
                return real_compile(fn, *args, **kwargs)

            def broken(*a):
                raise RuntimeError("injected Inductor failure")
            return broken
        monkeypatch.setattr(torch, "compile", inductor_fails)
        out, again = compiled(x), compiled(x)
    assert_close(out, expected)
    assert_close(again, expected)
    warnings = _warnings(hybrid_logs)
    assert any("injected run failure" in w for w in warnings), warnings
    assert sum("injected Inductor failure" in w and "eagerly" in w for w in warnings) == 1, warnings


def test_first_call_fallback_is_compiled_by_inductor(monkeypatch):
    """The partition's fallback is Inductor's compile of it, not an eager run that merely says so: Dynamo skipped
    the partition module's own code object, so until a GraphModule of its own was compiled, the fallback never
    reached Inductor."""
    monkeypatch.setattr(OnnxRuntimeEngine, "__call__", _broken_call)
    compiles = []
    real = runtime_module._inductor_with_our_decompositions

    def counted(gm, example_inputs, **kwargs):
        compiles.append(gm)
        return real(gm, example_inputs, **kwargs)
    monkeypatch.setattr(runtime_module, "_inductor_with_our_decompositions", counted)
    model, x = _model()
    with torch.no_grad():
        expected = model(x)
        compiled = torch.compile(model, backend="hybrid_trt")
        out, again = compiled(x), compiled(x)
    assert_close(out, expected)
    assert_close(again, expected)
    assert len(compiles) == 1


def test_first_call_failure_strict_raises(monkeypatch):
    monkeypatch.setattr(OnnxRuntimeEngine, "__call__", _broken_call)
    model, x = _model()
    compiled = torch.compile(model, backend="hybrid_trt", options={"strict": True})
    with pytest.raises(Exception) as info, torch.no_grad():
        compiled(x)
    assert any("injected run failure" in str(e) for e in _cause_chain(info.value))


def test_graph_needing_gradients_goes_to_inductor(hybrid_logs):
    """An eval-mode model called without torch.no_grad() (its parameters require grad): Inductor alone, and one
    warning saying nothing was delegated and what to do, since the values are right and nothing else shows it."""
    model, x = _model()
    model.train(False)
    x = x.requires_grad_()
    expected = model(x)
    compiled = torch.compile(model, backend="hybrid_trt")
    out = compiled(x)
    report = hybrid_trt.last_report()
    assert_close(out, expected.detach())
    assert report.whole_graph_reason and "gradients" in report.whole_graph_reason
    assert report.partitions == []
    assert "whole graph to Inductor" in report.table() and "nothing delegated" in report.table()
    said = [w for w in _warnings(hybrid_logs) if "needs gradients" in w]
    assert len(said) == 1 and "torch.no_grad()" in said[0] and "nothing is delegated" in said[0], said
    out.sum().backward()  # the Inductor-compiled graph is differentiable
    assert x.grad is not None and x.grad.shape == x.shape


def test_force_inductor_ops_keeps_convolutions_in_inductor():
    expected, out, again, report = _run({"force_inductor_ops": ["aten.convolution"], "min_block_size": 1})
    assert_close(out, expected)
    convs = [op for op in report.inductor_ops if op.op == "aten.convolution.default"]
    assert len(convs) == 1 and "force_inductor_ops" in convs[0].reason, report.table()
    assert all("aten.convolution.default" not in p.ops for p in report.partitions)
    assert report.delegated_op_count > 0  # the rest is still delegated


def test_min_block_size_reason():
    expected, out, again, report = _run({"min_block_size": 50})
    assert_close(out, expected)
    assert report.partitions == []
    assert report.inductor_ops and all("min_block_size=50" in op.reason for op in report.inductor_ops), \
        report.table()


def _failing_inductor(*args, **kwargs):
    raise RuntimeError("injected Inductor failure")


def test_inductor_failure_runs_the_stitched_graph_as_fx(monkeypatch, hybrid_logs):
    import hybrid_trt.backend as backend
    monkeypatch.setattr(backend, "compile_fx_inner", _failing_inductor)
    expected, out, again, report = _run(None)
    assert_close(out, expected)
    assert_close(again, expected)
    assert report.inductor_status.startswith("ran as FX graph") and "injected Inductor failure" in \
        report.inductor_status
    assert report.partitions[0].status == "delegated"  # the delegate call still runs inside the FX graph
    assert any("Inductor failed" in w and "injected Inductor failure" in w for w in _warnings(hybrid_logs))


def test_inductor_failure_strict_raises(monkeypatch):
    import hybrid_trt.backend as backend
    monkeypatch.setattr(backend, "compile_fx_inner", _failing_inductor)
    model, x = _model()
    compiled = torch.compile(model, backend="hybrid_trt", options={"strict": True})
    with pytest.raises(Exception) as info, torch.no_grad():
        compiled(x)
    assert any("injected Inductor failure" in str(e) for e in _cause_chain(info.value))


def test_a_shape_whose_engine_fails_to_build_is_reported_on_inductor(monkeypatch):
    """A symbolic partition builds an engine per input shape at run time; when a later shape's build fails, that
    shape runs on Inductor, and the report says so in the partition's status and op counts (it said "delegated"
    with every op counted as delegated)."""
    from hybrid_trt.delegates import registry
    delegate = registry._DELEGATES["onnxruntime"]
    build, builds = delegate.build, []

    def failing_build(*args, **kwargs):
        builds.append(1)
        if len(builds) > 1:
            raise RuntimeError("simulated build failure")
        return build(*args, **kwargs)
    monkeypatch.setattr(delegate, "build", failing_build)
    torch._dynamo.reset()
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.Conv2d(4, 4, 3)).eval()
    fast = torch.compile(model, backend="hybrid_trt", dynamic=True, options={"min_block_size": 1})
    with torch.no_grad():
        for batch in (2, 3, 3):
            x = torch.randn(batch, 3, 8, 8)
            torch.testing.assert_close(fast(x), model(x), rtol=1e-5, atol=1e-5)
    report = hybrid_trt.last_report()
    (part,) = report.partitions  # one symbolic graph: batch 2 built, batch 3 failed and runs on Inductor
    assert len(part.engines) == 1 and part.status_text == "delegated; 1 input shape(s) on Inductor", report.table()
    assert "simulated build failure" in report.table()
    data = report.to_dict()  # the data form says it too (status_text is a property asdict leaves out)
    assert data["partitions"][0]["status_text"] == part.status_text and data["partitions"][0]["status"] == "delegated"
    assert (data["delegated_op_count"], data["total_op_count"]) == (3, 3)
    json.dumps(data)
    part.engines.clear()  # as if the first shape had failed too
    assert part.status_text.startswith("fell back to Inductor") and report.delegated_op_count == 0
    assert report.total_op_count == 3 and "0/3 ops delegated in 0 partition(s)" in report.table()
