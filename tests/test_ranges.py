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
