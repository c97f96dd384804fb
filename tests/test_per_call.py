"""The per-call path: a graph of delegate calls alone is called directly (stitch/direct.py), everything else keeps
Inductor's compiled graph; both match eager. hybrid_trt.skip_guards_on_baked_weights drops only the guards of
weights baked into engines (guards.py)."""
import operator

import pytest
import torch
import torch.fx as fx
import torch.nn as nn

import hybrid_trt
from hybrid_trt.engines.op import delegate
from hybrid_trt.stitch.direct import DirectPlan, direct_callable, plan_of

from _helpers import assert_close


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.fc = nn.Linear(8, 5)

    def forward(self, x):
        y = torch.relu(self.bn(self.conv(x)))
        return self.fc(y.mean((2, 3)))


class TwoOutputs(ConvNet):
    def forward(self, x):
        y = torch.relu(self.bn(self.conv(x)))
        return self.fc(y.mean((2, 3))), y.amax((2, 3))


class AliasOfInput(ConvNet):
    """The second output is a view of the input. The partition computes it too (a copy, as every engine output
    is), so the graph is all delegate calls; AOTAutograd's wrapper replaces it by the view eager returns."""

    def forward(self, x):
        return super().forward(x), x.reshape(x.shape[0], -1)


class Counter(ConvNet):
    """A buffer the graph writes: an input mutation, applied by AOTAutograd's wrapper."""

    def __init__(self):
        super().__init__()
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x):
        self.calls += 1
        return super().forward(x)


class SplitAtAtan2(ConvNet):
    """atan2 has no lowering, and it reads a weight: that weight stays an Inductor input."""

    def __init__(self):
        super().__init__()
        self.angle = nn.Parameter(torch.randn(5))

    def forward(self, x):
        return torch.atan2(super().forward(x), self.angle)


def _compile(model, **options):
    options.setdefault("min_block_size", 1)
    return torch.compile(model, backend="hybrid_trt", options=options)


@pytest.mark.parametrize("cls", [ConvNet, TwoOutputs])
def test_fully_delegated_graph_is_called_directly_and_matches_eager(cls):
    torch.manual_seed(0)
    model, x = cls().eval(), torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        compiled = _compile(model)
        assert_close(compiled(x), model(x))
        report = hybrid_trt.last_report()
        assert len(report.partitions) == 1 and not report.inductor_ops, report.table()
        assert report.per_call == "direct"
        other = torch.randn(2, 3, 16, 16)
        assert_close(compiled(other), model(other))  # new data, same engine
        first = compiled(x)
        compiled(other)
        assert_close(first, model(x))  # outputs are the caller's: a later call does not overwrite them


@pytest.mark.parametrize("cls", [AliasOfInput, Counter, SplitAtAtan2])
def test_graphs_the_wrappers_do_work_for_keep_inductors_compiled_graph(cls):
    torch.manual_seed(0)
    model, reference = cls().eval(), cls().eval()
    reference.load_state_dict(model.state_dict())
    x = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        compiled = _compile(model)
        for _ in range(2):
            out, expected = compiled(x), reference(x)
            assert_close(out, expected)
        assert hybrid_trt.last_report().per_call == "inductor"
        report = hybrid_trt.last_report()
        if cls is AliasOfInput:
            assert len(report.partitions) == 1 and not report.inductor_ops, report.table()  # all delegated...
            assert out[1].data_ptr() == x.data_ptr()  # ...and still the view of the input eager returns
        if cls is Counter:
            assert model.calls.item() == 2  # the mutation reached the module's buffer


def test_plan_of_chained_partitions_and_direct_callable():
    """Two delegate calls, the second fed by the first and by a graph input, outputs picked and reordered."""
    g = fx.Graph()
    a, b = g.placeholder("a"), g.placeholder("b")
    first = g.call_function(delegate, ("k1", [a], []))
    f0, f1 = (g.call_function(operator.getitem, (first, i)) for i in (0, 1))
    second = g.call_function(delegate, ("k2", [f1, b], []))
    s0 = g.call_function(operator.getitem, (second, 0))
    g.output((s0, f0))
    plan = plan_of(fx.GraphModule(nn.Module(), g))
    assert plan == DirectPlan((("k1", ((-1, 0),)), ("k2", ((0, 1), (-1, 1)))), ((1, 0), (0, 0)))
    assert DirectPlan.from_json(plan.to_json()) == plan

    class Runtime:
        def __init__(self, fn):
            self.run = lambda inputs, sizes: fn(*inputs)
    runtimes = {"k1": Runtime(lambda t: [t + 1, t * 2]), "k2": Runtime(lambda u, v: [u - v])}
    run = direct_callable(plan, runtimes)
    x, y = torch.tensor([1.0, 2.0]), torch.tensor([10.0, 20.0])
    out = run(x, y)
    assert torch.equal(out[0], x * 2 - y) and torch.equal(out[1], x + 1)
    assert direct_callable(plan, {"k1": runtimes["k1"]}) is None  # a runtime missing: Inductor's graph instead


def test_plan_of_refuses_anything_but_delegate_calls():
    g = fx.Graph()
    a = g.placeholder("a")
    call = g.call_function(delegate, ("k", [a], []))
    out = g.call_function(operator.getitem, (call, 0))
    g.output((g.call_function(torch.ops.aten.relu.default, (out,)),))
    assert plan_of(fx.GraphModule(nn.Module(), g)) is None
    g = fx.Graph()
    a = g.placeholder("a")
    call = g.call_function(delegate, ("k", [a], []))
    g.output((g.call_function(operator.getitem, (call, 0)), a))  # an input returned: an alias
    assert plan_of(fx.GraphModule(nn.Module(), g)) is None


def _guard_counts(model, x, backend="hybrid_trt", **options):
    """Compiles ``model`` with the baked-weights filter; returns the TENSOR_MATCH source names kept and dropped."""
    seen = {}

    def recording(entries):
        keep = hybrid_trt.skip_guards_on_baked_weights(entries)
        names = [(e.orig_guard.originating_source.name, k) for e, k in zip(entries, keep)
                 if e.guard_type == "TENSOR_MATCH"]
        seen["kept"] = {n for n, k in names if k}
        seen["dropped"] = {n for n, k in names if not k}
        return keep
    opts = {"guard_filter_fn": recording, **options}
    if backend == "hybrid_trt":
        opts.setdefault("min_block_size", 1)
    compiled = torch.compile(model, backend=backend, options=opts)
    return compiled, seen


def test_baked_weights_filter_drops_only_the_guards_of_weights_inside_engines():
    torch.manual_seed(0)
    model, x = SplitAtAtan2().eval(), torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        compiled, seen = _guard_counts(model, x)
        assert_close(compiled(x), model(x))
    dropped, kept = seen["dropped"], seen["kept"]
    assert any("conv" in n for n in dropped) and any("fc" in n for n in dropped)
    assert any("angle" in n for n in kept)  # read by Inductor's atan2: its guard stays
    assert len([n for n in kept if "_parameters" not in n and "_buffers" not in n]) == 1  # the input's guard
    with torch.no_grad():  # input guards stay: another shape recompiles and is right
        y = torch.randn(1, 3, 8, 8)
        assert_close(compiled(y), model(y))
        model.train()  # module guards stay: the training flag recompiles (batch statistics, as eager)
        assert_close(compiled(x), model(x))


@pytest.mark.parametrize("cls", [ConvNet, SplitAtAtan2])
def test_weights_installed_as_graph_attributes_are_baked_too(cls):
    """Dynamo's install_free_tensors makes weights attributes of the captured graph, which AOTAutograd passes in
    front of the arguments: they are baked into the engine all the same (not engine inputs), a graph of delegate
    calls alone is still called directly, and the filter drops the guards of those weights only."""
    torch.manual_seed(0)
    model, x = cls().eval(), torch.randn(2, 3, 16, 16)
    with torch.no_grad(), torch._dynamo.config.patch(install_free_tensors=True):
        compiled, seen = _guard_counts(model, x)
        assert_close(compiled(x), model(x))
        report = hybrid_trt.last_report()
        assert report.partitions[0].input_shapes == [[2, 3, 16, 16]], report.table()  # weights are initializers
        assert report.per_call == ("direct" if cls is ConvNet else "inductor")
        y = torch.randn(2, 3, 16, 16)
        assert_close(compiled(y), model(y))
    assert any("conv" in n for n in seen["dropped"]) and any("fc" in n for n in seen["dropped"])
    assert not any("angle" in n for n in seen["dropped"])  # Inductor's atan2 reads it


def test_baked_weights_filter_drops_nothing_for_other_backends():
    torch.manual_seed(0)
    model, x = ConvNet().eval(), torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        compiled, seen = _guard_counts(model, x, backend="inductor")
        assert_close(compiled(x), model(x))
    assert not seen["dropped"] and any("conv" in n for n in seen["kept"])


def test_baked_weights_filter_after_a_warm_start_drops_the_same_guards():
    """A second compile served by Inductor's cache (nothing partitioned) takes the baked weights from the graph
    manifest."""
    torch.manual_seed(0)
    model, x = ConvNet().eval(), torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        compiled, cold = _guard_counts(model, x)
        assert_close(compiled(x), model(x))
        torch._dynamo.reset()
        compiled, warm = _guard_counts(model, x)
        assert_close(compiled(x), model(x))
    report = hybrid_trt.last_report()
    # ConvNet is called directly: its warm compile is served by the manifest alone, Inductor is not consulted
    assert report.from_graph_manifest and report.per_call == "direct" and not report.from_inductor_cache
    assert cold["dropped"] and warm == cold


def test_warm_start_restores_the_direct_call_and_the_baked_weights(tmp_path):
    from test_cache_isolation import run_child
    cold = run_child(tmp_path, "hybrid_trt", "transformer")
    warm = run_child(tmp_path, "hybrid_trt", "transformer")
    assert cold["matches"] and warm["matches"], warm["tables"]
    # served by the graph manifest and the engine store: no Inductor lookup (it would hash torch's sources)
    assert warm["from_graph_manifest"] == [True] and warm["from_inductor_cache"] == [False], warm["tables"]
    assert not warm["aot_cache"] and not warm["fx_cache"], warm  # Inductor's caches were never looked up
    assert cold["per_call"] == warm["per_call"] == ["direct"], (cold["per_call"], warm["per_call"])
    assert warm["delegate_calls"] > 0
