"""The plugin registry: a plugin's lowerings are registered when a compiled or exported graph first calls one of
its ops, never as a side effect of importing the plugin (a process that imports it compiles other models with the
same lowerings and engine keys as before)."""

from __future__ import annotations

import pathlib
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.fx as fx

from hybrid_trt.plugins import registry

REPO = pathlib.Path(__file__).resolve().parents[2]


def _run(code: str) -> str:
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=600,
                          cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


def test_importing_the_sparse_plugin_registers_no_lowering():
    out = _run("""
        from hybrid_trt.lowerings import registered_targets
        before = registered_targets()
        import hybrid_trt.plugins.sparse  # the ops and modules
        from hybrid_trt.plugins import registry
        import torch
        assert hasattr(torch.ops.hybrid_trt, "sparse_conv_compute")
        print("same lowerings", registered_targets() == before, "active", sorted(registry.active()))
    """)
    assert "same lowerings True active []" in out


def test_compiling_a_sparse_model_activates_the_plugin():
    out = _run("""
        import sys, torch
        sys.path.insert(0, "tests/plugins")
        from sparse_dense_ref import random_cloud
        from hybrid_trt.lowerings import registered_targets
        from hybrid_trt.plugins import registry
        from hybrid_trt.plugins.sparse import SparseConvTensor, SubMConv3d

        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = SubMConv3d(4, 4, 3, indice_key="a")

            def forward(self, feats, coords):
                return self.conv(SparseConvTensor(feats, coords, (6, 6, 6), 1)).features

        feats, coords = random_cloud(1, (6, 6, 6), 0.2, 4, seed=0)
        net = Net().eval()
        with torch.no_grad():
            expected = net(feats, coords)
            out = torch.compile(net, backend="hybrid_trt")(feats, coords)
        import hybrid_trt
        sparse = sorted(str(t) for t in registered_targets() if "sparse_" in str(t))
        reasons = sorted({op.reason for op in hybrid_trt.last_report().inductor_ops if "sparse_" in op.op})
        print("active", sorted(registry.active()), "sparse lowerings", len(sparse),
              "match", torch.allclose(out, expected, atol=1e-5))
        print("REASONS", reasons)
    """)
    assert "active ['sparse']" in out and "match True" in out
    assert "sparse lowerings 0" not in out
    # Activated before partitioning: the ops were judged with their lowerings (left to Inductor because only the
    # TensorRT delegate takes their domain), not as ops without one.
    reasons = out.split("REASONS", 1)[1]
    assert "no lowering" not in reasons and "hybrid_trt.sparse" in reasons, reasons


def test_a_declared_plugin_activates_once_for_a_graph_that_calls_its_op(tmp_path, monkeypatch):
    lib = torch.library.Library("htrt_registry_test", "DEF")
    lib.define("double(Tensor x) -> Tensor")
    lib.impl("double", lambda x: x * 2, "CompositeExplicitAutograd")
    (tmp_path / "htrt_registry_test_activation.py").write_text("CALLS = []\n\n\ndef activate():\n    CALLS.append(1)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    plugin = registry.Plugin("registry-test", "htrt_registry_test::", "htrt_registry_test_activation:activate")
    registry.register_plugin(plugin)
    try:
        graph = fx.Graph()
        x = graph.placeholder("x")
        graph.output(graph.call_function(torch.ops.aten.relu.default, (x,)))
        assert registry.activate_for(graph) == () and "registry-test" not in registry.active()
        graph = fx.Graph()
        x = graph.placeholder("x")
        graph.output(graph.call_function(torch.ops.htrt_registry_test.double.default, (x,)))
        assert registry.activate_for(graph) == ("registry-test",)
        assert "registry-test" in registry.active() and "htrt_registry_test_activation" in sys.modules
        assert registry.activate_for(graph) == ()  # once
        assert sys.modules["htrt_registry_test_activation"].CALLS == [1]  # its function was called, once
        with pytest.raises(ValueError, match="already registered"):
            registry.register_plugin(registry.Plugin("registry-test", "other::", "other"))
    finally:
        registry._PLUGINS.pop("registry-test", None)
        registry._ACTIVE.discard("registry-test")
        sys.modules.pop("htrt_registry_test_activation", None)


def test_an_unknown_plugin_name_is_refused():
    with pytest.raises(KeyError, match="no plugin named 'nope'"):
        registry.activate("nope")


def test_qualified_names_of_overloads_and_packets():
    assert registry._qualified_name(torch.ops.aten.relu.default) == "aten::relu"
    assert registry._qualified_name(torch.ops.aten.relu) == "aten::relu"
    assert registry._qualified_name(max) == "" and registry._qualified_name("x") == ""


def test_a_plugin_whose_activation_fails_is_reported_once_and_the_compile_goes_on(tmp_path, monkeypatch, caplog):
    lib = torch.library.Library("htrt_registry_broken", "DEF")
    lib.define("triple(Tensor x) -> Tensor")
    lib.impl("triple", lambda x: x * 3, "CompositeExplicitAutograd")
    (tmp_path / "htrt_registry_broken_activation.py").write_text(
        "def activate():\n    raise ImportError('libfoo.so not found')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    registry.register_plugin(registry.Plugin("registry-broken", "htrt_registry_broken::",
                                             "htrt_registry_broken_activation:activate"))
    try:
        def f(x):
            return torch.ops.htrt_registry_broken.triple(x) + 1

        x = torch.randn(4)
        with caplog.at_level("WARNING", logger="hybrid_trt"):
            out = torch.compile(f, backend="hybrid_trt")(x)
            torch._dynamo.reset()
            torch.compile(f, backend="hybrid_trt")(x)
        assert torch.equal(out, x * 3 + 1)
        warnings = [r for r in caplog.records if "registry-broken" in r.getMessage()]
        assert len(warnings) == 1 and "libfoo.so not found" in warnings[0].getMessage()
        assert "registry-broken" not in registry.active()
    finally:
        registry._PLUGINS.pop("registry-broken", None)
        registry._FAILED.discard("registry-broken")


def test_callers_of_names_the_plugins_a_graph_calls():
    graph = fx.Graph()
    x = graph.placeholder("x")
    graph.output(graph.call_function(torch.ops.aten.relu.default, (x,)))
    assert registry.callers_of(graph) == ()
    import hybrid_trt.plugins.sparse  # noqa: F401  (defines the ops)
    graph = fx.Graph()
    nbr = graph.placeholder("nbr")
    graph.output(graph.call_function(torch.ops.hybrid_trt.sparse_rulebook_order.default, (nbr,)))
    assert registry.callers_of(graph) == ("sparse",)


def test_ops_in_a_subgraph_of_the_module_are_found():
    """Checkpointed or ``cond`` bodies are submodules the top-level graph reaches through ``get_attr``."""
    import hybrid_trt.plugins.sparse  # noqa: F401  (defines the ops)
    body = fx.Graph()
    nbr = body.placeholder("nbr")
    body.output(body.call_function(torch.ops.hybrid_trt.sparse_rulebook_order.default, (nbr,)))
    root = torch.nn.Module()
    root.body = fx.GraphModule(torch.nn.Module(), body)
    top = fx.Graph()
    x = top.placeholder("x")
    top.output(top.call_function(torch.ops.aten.relu.default, (top.get_attr("body"), x)))
    parent = fx.GraphModule(root, top)
    assert registry.callers_of(parent.graph) == ("sparse",)


def test_another_plugins_lowerings_stay_out_of_a_graphs_key():
    out = _run("""
        import torch, torch.fx as fx
        from hybrid_trt.lowerings import registered_targets
        from hybrid_trt.plugins import registry
        g = fx.Graph()
        x = g.placeholder("x")
        g.output(g.call_function(torch.ops.aten.relu.default, (x,)))
        before = registered_targets() - registry.foreign_targets(g)
        registry.activate("sparse")  # as compiling a LiDAR model in this process would
        after = registered_targets() - registry.foreign_targets(g)
        print("grew", len(registered_targets()) > len(before), "same key lowerings", before == after)
    """)
    assert "grew True same key lowerings True" in out
