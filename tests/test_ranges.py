"""One engine for a range of shapes (engines/ranges.py): the plan, its sample points and profile, the generic
model and where two lowerings differ, on real lowerings of small FX partitions and real ONNX Runtime sessions.
The export round trips (ranged and per-shape packages loaded in a fresh process) are in test_export.py."""
import onnx
import pytest
import sympy
import torch

from hybrid_trt.delegates import get_delegate
from hybrid_trt.delegates.tensorrt_delegate import profile_shapes
from hybrid_trt.engines import ranges
from hybrid_trt.lowerings.to_onnx import lower_partition

S, T = sympy.Symbol("s0", integer=True, positive=True), sympy.Symbol("s1", integer=True, positive=True)
BOUNDS = {"s0": (1, 4, 8), "s1": (3, 3, 5)}


def test_plan_text_profile_and_cover():
    plan = ranges.plan_range([[S, 3, 16], [S, 6], [T]], [[S, 16], [2 * S]], [], BOUNDS)
    assert plan.text() == "[1..8]x3x16, [1..8]x6, [3..5]"
    assert plan.text(name_ties=True) == "s0:[1..8]x3x16, s0:[1..8]x6, [3..5]" and plan.ties()
    assert plan.outputs == (("s0", 16), ("2*s0",))
    # TensorRT's profile: per input (min, opt, max); opt is the declared opt, not the middle of the range.
    assert plan.profile() == [((1, 3, 16), (4, 3, 16), (8, 3, 16)), ((1, 6), (4, 6), (8, 6)), ((3,), (3,), (5,))]
    assert plan.covers([(1, 3, 16), (1, 6), (5,)]) and plan.covers([(8, 3, 16), (8, 6), (3,)])
    assert not plan.covers([(9, 3, 16), (9, 6), (3,)])  # past max
    assert not plan.covers([(0, 3, 16), (0, 6), (3,)])  # below min
    assert not plan.covers([(2, 3, 16), (3, 6), (3,)])  # one symbol, two values
    assert not plan.covers([(2, 3, 17), (2, 6), (3,)])  # a static dim differs
    assert ranges.RangePlan.from_json(plan.to_json()) == plan


def test_sample_points_are_distinct_and_inside():
    plan = ranges.plan_range([[S, 3], [T]], [[S]], [], BOUNDS)
    points = ranges.sample_points(plan)
    assert points[0] == {"s0": 1, "s1": 3} and points[1] == {"s0": 8, "s1": 5}
    interior = points[2]
    assert 1 < interior["s0"] < 8 and 3 < interior["s1"] < 5 and interior["s0"] != interior["s1"]
    fixed = ranges.plan_range([[S]], [[S]], [], {"s0": (4, 4, 4)})
    assert ranges.sample_points(fixed) == [{"s0": 4}]


@pytest.mark.parametrize("dims,sizes,bounds,why", [
    ([[2 * S, 3]], [], BOUNDS, "not a dynamic dimension of its own"),
    ([[S, 3]], [], {}, "no declared finite range"),
    ([[S, 3]], [T], BOUNDS, "no input dimension carries"),
    ([[2, 3]], [], BOUNDS, "no input dimension is dynamic"),
])
def test_plan_refuses_what_it_cannot_cover(dims, sizes, bounds, why):
    with pytest.raises(ranges.NotRanged, match=why):
        ranges.plan_range(dims, [], sizes, bounds)


def _aten_module(fn, example):
    from torch.fx.experimental.proxy_tensor import make_fx
    return make_fx(fn)(example)


def _lowered(fn, batch, plan):
    gm = _aten_module(fn, torch.randn(2, 6))
    model, metas = lower_partition(gm, [(batch, 6)], [torch.float32])
    return ranges.generic_model(model, plan), metas


W = torch.randn(6, 4)


def _generic_fn(x):
    return (torch.relu(x @ W) * 2,)


def _baked_module():
    """A partition that reshapes to a size it takes as an input (the backend's size placeholders): the
    lowering writes the size into the Reshape's target shape."""
    aten = torch.ops.aten
    root = torch.nn.Module()
    root.register_buffer("w", W)
    g = torch.fx.Graph()
    x, n = g.placeholder("input_0"), g.placeholder("size_0")
    mm = g.call_function(aten.mm.default, (x, g.get_attr("w")))
    g.output((g.call_function(aten.view.default, (mm, [n, 2])),))
    return torch.fx.GraphModule(root, g)


def test_shape_generic_partition_gives_one_model_that_runs_the_whole_range():
    plan = ranges.plan_range([[S, 6]], [[S, 4]], [], {"s0": (1, 4, 8)})
    models = [_lowered(_generic_fn, point["s0"], plan)[0] for point in ranges.sample_points(plan)]
    assert all(ranges.first_difference(models[0], m) is None for m in models[1:])
    model = models[0]
    assert [d.dim_param for d in model.graph.input[0].type.tensor_type.shape.dim] == ["s0", ""]
    assert ranges.profile_of(model) == {model.graph.input[0].name: ((1, 6), (4, 6), (8, 6))}
    onnx.checker.check_model(model)
    # One real ONNX Runtime session serves every batch of the range.
    ort = get_delegate("onnxruntime")
    options = ort.options_from(__import__("hybrid_trt").make_options({"num_threads": 1}))
    engine = ort.build(model, [torch.empty(4, 4, device="meta")], torch.device("cpu"), options)
    for batch in (1, 3, 8):
        x = torch.randn(batch, 6)
        torch.testing.assert_close(engine([x])[0], _generic_fn(x)[0])


def test_shape_baked_into_a_constant_is_named():
    plan = ranges.plan_range([[S, 6]], [[2 * S, 2]], [2 * S], {"s0": (1, 4, 8)})
    a, b = (ranges.generic_model(lower_partition(_baked_module(), [(batch, 6)], [torch.float32], (2 * batch,))[0],
                                 plan) for batch in (1, 8))
    why = ranges.first_difference(a, b)
    assert why is not None and why.startswith("shape-specific constants in the lowered graph: Reshape at node")


def test_tensorrt_profile_shapes_follow_the_network_inputs():
    """What the TensorRT delegate passes to IOptimizationProfile.set_shape (TensorRT itself cannot run here)."""
    profile = {"input_1": ((1, 6), (4, 6), (8, 6)), "input_0": ((1, 3, 16), (4, 3, 16), (8, 3, 16))}
    assert profile_shapes(profile, ["input_0", "input_1"]) == [
        ("input_0", ((1, 3, 16), (4, 3, 16), (8, 3, 16))), ("input_1", ((1, 6), (4, 6), (8, 6)))]
    with pytest.raises(RuntimeError, match=r"no shapes for input\(s\) \['input_2'\]"):
        profile_shapes(profile, ["input_0", "input_2"])


class _Views(torch.nn.Module):
    """The view family and expand on a dynamic batch: each target is a copied dim (0), constants, and at most
    one inferred dim (-1), or (expand) a broadcast that keeps the input's dim (1)."""

    def forward(self, x):  # x: (B, 2, 3)
        b = x.shape[0]
        return (x.flatten(1),  # (B, 6): [0, 6]
                x.reshape(-1),  # (6B,): [-1]
                x.unsqueeze(0),  # (1, B, 2, 3): [1, -1, 2, 3]
                x.transpose(0, 1).reshape(2, -1),  # (2, 3B): [2, -1]
                x.view(b * 2, 3),  # the batch mixed into a dim: [-1, 3]
                x[:, :1].expand(-1, 4, 3))  # Expand: [1, 4, 3]


class _TwoInferred(torch.nn.Module):
    """(1, 1, B, B) squeezed to (B, B): neither batch dim is at its input's position and only one can be -1,
    so no constant Reshape target serves every batch."""

    def forward(self, x):  # x: (B, 2)
        square = x[:, :1] * x[:, 1].unsqueeze(0)  # (B, B)
        return (torch.squeeze(square[None, None] * 2, (0, 1)),)


def _exported_partition(model, example, batch):
    """The model as the export front end captures it, with its size computations as size placeholders (what
    partitioner.extract gives a delegate), and each size placeholder's expression."""
    from hybrid_trt.capture.exported import capture_export
    gm = capture_export(model, (example,), dynamic_shapes=({0: batch},)).gm
    graph = gm.graph
    first = next(n for n in graph.nodes if n.op != "placeholder")
    sizes = [n for n in graph.nodes if n.op == "call_function" and isinstance(n.meta.get("val"), torch.SymInt)
             and any(isinstance(u.meta.get("val"), torch.Tensor) for u in n.users)]
    exprs = []
    for i, node in enumerate(sizes):
        with graph.inserting_before(first):
            placeholder = graph.placeholder(f"size_{i}")
        placeholder.meta["val"] = node.meta["val"]
        node.replace_all_uses_with(placeholder)
        exprs.append(node.meta["val"].node.expr)
    graph.eliminate_dead_code()
    gm.recompile()
    return gm, exprs


def _reshape_targets(model):
    inits = {t.name: onnx.numpy_helper.to_array(t).tolist() for t in model.graph.initializer}
    return [(n.op_type, inits[n.input[1]]) for n in model.graph.node if n.op_type in ("Reshape", "Expand")]


def _lower_at(gm, exprs, shape, target=None):
    symbol = next(iter(exprs[0].free_symbols)) if exprs else None
    sizes = tuple(ranges.evaluate(e, {str(symbol): shape[0]}) for e in exprs)
    return lower_partition(gm, [shape], [torch.float32], sizes)[0]


def test_view_family_targets_are_shape_generic_on_a_dynamic_batch():
    """Lowered at batches 2 and 7 (the lowering runs at concrete shapes), every Reshape/Expand target is the
    same: the traced symbolic sizes say which dims are copies of the input's and which one is inferred. One
    ONNX Runtime session over the dim_param model then matches eager at every batch of the range."""
    model = _Views()
    gm, exprs = _exported_partition(model, torch.randn(4, 2, 3), torch.export.Dim("batch", min=1, max=8))
    a, b = (_lower_at(gm, exprs, (batch, 2, 3)) for batch in (2, 7))
    assert _reshape_targets(a) == _reshape_targets(b) == [
        ("Reshape", [0, 6]), ("Reshape", [-1]), ("Reshape", [1, -1, 2, 3]), ("Reshape", [2, -1]),
        ("Reshape", [-1, 3]), ("Expand", [1, 4, 3])]
    assert all(not n.attribute for n in a.graph.node if n.op_type == "Reshape")  # allowzero 0: 0 copies
    (x,) = [n for n in gm.graph.nodes if n.op == "placeholder" and isinstance(n.meta["val"], torch.Tensor)]
    batch = x.meta["val"].shape[0].node.expr
    out = next(n for n in gm.graph.nodes if n.op == "output").args[0]
    out_dims = [[s.node.expr if isinstance(s, torch.SymInt) else s for s in o.meta["val"].shape] for o in out]
    plan = ranges.plan_range([[batch, 2, 3]], out_dims, exprs, {str(batch): (1, 4, 8)})
    generic = [ranges.generic_model(m, plan) for m in (a, b)]
    assert ranges.first_difference(*generic) is None
    ort = get_delegate("onnxruntime")
    options = ort.options_from(__import__("hybrid_trt").make_options({"num_threads": 1}))
    engine = ort.build(generic[0], [o.meta["val"] for o in out], torch.device("cpu"), options)
    for size in (1, 3, 8):
        x = torch.randn(size, 2, 3)
        for got, expected in zip(engine([x]), model(x), strict=True):
            torch.testing.assert_close(got, expected)


def test_static_trace_keeps_concrete_targets():
    """Without symbolic sizes the lowering is exactly the per-shape one: every target holds the numbers."""
    gm, exprs = _exported_partition_static(_Views(), torch.randn(4, 2, 3))
    assert exprs == []
    assert _reshape_targets(lower_partition(gm, [(4, 2, 3)], [torch.float32])[0]) == [
        ("Reshape", [4, 6]), ("Reshape", [24]), ("Reshape", [1, 4, 2, 3]), ("Reshape", [2, 12]),
        ("Reshape", [8, 3]), ("Expand", [4, 4, 3])]


def _exported_partition_static(model, example):
    from hybrid_trt.capture.exported import capture_export
    return capture_export(model, (example,)).gm, []


def test_two_batch_dims_no_constant_target_expresses_are_named():
    gm, exprs = _exported_partition(_TwoInferred(), torch.randn(4, 2), torch.export.Dim("batch", min=2, max=8))
    a, b = (_lower_at(gm, exprs, (batch, 2)) for batch in (2, 7))
    plan = ranges.plan_range([[S, 2]], [[S, S]], [], {"s0": (2, 4, 8)})
    why = ranges.first_difference(ranges.generic_model(a, plan), ranges.generic_model(b, plan))
    assert why is not None and why.startswith("shape-specific constants in the lowered graph: Reshape at node")
