"""Slices, Resize and factories that lower shape-generic under a dynamic range (lowerings/ops/_dims.py), so
export gives their partition ONE engine for the range instead of one per shape.

Each model goes through export's own middle passes (torch.export capture, partition, lowering at the range's
sample points, ``ranges.first_difference``, a real ONNX Runtime engine built into a real store); the stitched
graph then runs at the range's min, opt, max and an in-between shape, served by that one engine, and matches
eager PyTorch. Before these lowerings each model here kept engines per shape (its range note named the Slice,
Resize, Gather or initializer that baked a size). test_export.py has the package round trips; test_ranges.py the
plan and the Reshape/Expand targets.
"""
import pathlib

import onnx
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.export import Dim

from hybrid_trt.capture.exported import capture_export
from hybrid_trt.export.api import _middle
from hybrid_trt.lowerings.to_onnx import lower_partition
from hybrid_trt.options import make_options
from hybrid_trt.report import new_report


class SliceToEnd(nn.Module):
    """Bounds that are the sliced dim's own size expression: to the end, and k before the end."""

    def forward(self, x):
        h = x.shape[2]
        return torch.relu(x[:, :, 1:h]) * 2, x[:, :, : h - 1] + 1, x[..., 1 : x.shape[3] - 1] * 3, x[..., -3:] - 1


class CropToOther(nn.Module):
    """A U-Net style crop to another tensor's size (no constant expresses it: the bound reads that size)."""

    def forward(self, x):
        pooled = F.max_pool2d(x, 2)
        return x[:, :, : pooled.shape[2], : pooled.shape[3]] * 2 + 1, pooled


class SelectFromEnd(nn.Module):
    def forward(self, x):
        return torch.relu(x[:, :, -1]) * 2, x[:, :, -2] + x[:, :, 0]


class Upsample(nn.Module):
    """Output sizes that are exact multiples of the input's: Resize scales instead of sizes."""

    def __init__(self, mode, align_corners=None, by_size=False):
        super().__init__()
        self.mode, self.align_corners, self.by_size = mode, align_corners, by_size

    def forward(self, x):
        x = torch.relu(x)
        if self.by_size:
            up = F.interpolate(x, size=(x.shape[2] * 2, x.shape[3] * 3), mode=self.mode,
                               align_corners=self.align_corners)
        else:
            up = F.interpolate(x, scale_factor=2, mode=self.mode, align_corners=self.align_corners)
        return (up + 1,)


class TopDown(nn.Module):
    """torchvision's FPN top-down step: the coarser map upsampled to the lateral map's size (an odd size is
    no multiple of the coarser one's, so the Resize reads its sizes from the lateral map's shape)."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 4, 3, padding=1)
        self.down = nn.Conv2d(4, 4, 3, stride=2, padding=1)
        self.lateral = nn.Conv2d(4, 4, 1)
        self.top = nn.Conv2d(4, 4, 1)

    def forward(self, x):
        c1 = torch.relu(self.stem(x))
        c2 = torch.relu(self.down(c1))
        lateral = self.lateral(c1)
        return (lateral + F.interpolate(self.top(c2), size=lateral.shape[-2:], mode="nearest"),)


class SizedConstants(nn.Module):
    """Constants whose size is the input's: a position ramp, a concatenated channel of ones, a zeros_like."""

    def forward(self, x):
        ramp = torch.arange(x.shape[-1], dtype=x.dtype, device=x.device)
        rows = torch.arange(1, x.shape[2] + 1, device=x.device).to(x.dtype)
        ones = torch.ones(x.shape[0], 1, x.shape[2], x.shape[3], device=x.device)
        return (x * ramp + rows[:, None], torch.cat([x, ones], 1) * 2, torch.zeros_like(x) + x * 3,
                torch.full_like(x, 0.5) * x)


class IntegerKeys(nn.Module):
    """int64 sums past 2**53 (voxel- or hash-style keys): exact running sums (CumSum and a Slice per reduced axis),
    with no size written into the graph."""

    def forward(self, x):
        keys = (x * 1000).to(torch.int64) * 2 ** 40
        return torch.relu(x) * 2, keys.sum(-1) + 1, keys.sum((1, 3), keepdim=True) * 3


BATCH = Dim("batch", min=1, max=4)
SPATIAL = {0: BATCH, 2: Dim("h", min=4, max=12), 3: Dim("w", min=4, max=12)}

CASES = {
    "slice_to_end": (SliceToEnd, SPATIAL),
    # torch.export's solver cannot prove h // 2 <= h for a Dim; DYNAMIC hints with the same bounds let it trace.
    "crop_to_other": (CropToOther, {0: BATCH, 2: Dim.DYNAMIC(min=4, max=12),
                                    3: Dim.DYNAMIC(min=4, max=12)}),
    "select_from_end": (SelectFromEnd, SPATIAL),
    "bilinear_align_corners": (lambda: Upsample("bilinear", align_corners=True), SPATIAL),
    "bilinear_by_size": (lambda: Upsample("bilinear", align_corners=False, by_size=True), SPATIAL),
    "nearest_by_size": (lambda: Upsample("nearest", by_size=True), SPATIAL),
    "fpn_top_down": (TopDown, SPATIAL),
    "sized_constants": (SizedConstants, SPATIAL),
    "integer_keys": (IntegerKeys, SPATIAL),
}
# (batch, h, w): min, opt (the example's), max, and in between (odd sizes, none of them sampled).
POINTS = [(1, 4, 4), (2, 8, 8), (4, 12, 12), (3, 7, 11)]


def _export_middle(model, dynamic, tmp_path):
    example = torch.randn(2, 3, 8, 8)
    capture = capture_export(model, (example,), dynamic_shapes=(dynamic,))
    stitched, runtimes, _graph_reasons = _middle(capture, make_options({"num_threads": 1}), new_report(),
                                                 pathlib.Path(tmp_path) / "store", 1, (example,))
    return capture, stitched, runtimes


def _call(capture, stitched, x):
    args = [None] * len(capture.inputs)
    for i, w in capture.weights.items():
        args[i] = w
    (user,) = capture.user_inputs
    args[user] = x
    return stitched(*args)


@pytest.mark.parametrize("name", sorted(CASES))
def test_one_engine_for_the_range_matches_eager(name, tmp_path):
    factory, dynamic = CASES[name]
    torch.manual_seed(0)
    model = factory().eval()
    capture, stitched, runtimes = _export_middle(model, dynamic, tmp_path)
    assert len(runtimes) == 1, [r.name for r in runtimes]
    (runtime,) = runtimes
    assert runtime.symbolic and runtime.range_note is None, runtime.range_note
    assert [plan.text() for plan, _key, _engine in runtime.ranged] == ["[1..4]x3x[4..12]x[4..12]"]
    for b, h, w in POINTS:
        x = torch.randn(b, 3, h, w)
        with torch.no_grad():
            got, expected = _call(capture, stitched, x), model(x)
        for g, e in zip(got, expected, strict=True):
            torch.testing.assert_close(g, e, msg=lambda m: f"{name} at {(b, h, w)}: {m}")
    # Every shape was served by the engine for the range: nothing was built per shape.
    assert [r.signature for r in runtime.report.engines] == ["range [1..4]x3x[4..12]x[4..12]"]


def _ops(model):
    return [n.op_type for n in model.graph.node]


def test_static_traces_lower_as_before():
    """Without symbolic sizes each of these lowers to this shape's numbers, with no shape arithmetic: the
    graph (and the engine key) of a static partition is unchanged."""
    for name in ("slice_to_end", "crop_to_other", "select_from_end", "fpn_top_down", "sized_constants",
                 "bilinear_align_corners", "nearest_by_size"):
        gm = capture_export(CASES[name][0]().eval(), (torch.randn(2, 3, 8, 8),)).gm
        metas = [n.meta["val"] for n in gm.graph.nodes if n.op == "placeholder"]
        ops = _ops(lower_partition(gm, [tuple(m.shape) for m in metas], [m.dtype for m in metas])[0])
        assert not {"Shape", "ConstantOfShape", "Range", "Squeeze"} & set(ops), (name, ops)


def _slice_inputs(lo):
    """fx nodes for ``x[:, :n - 5]``, n a size the shape environment bounds below by ``lo``."""
    from torch._dynamo.source import ConstantSource
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv, StrictMinMaxConstraint
    from torch.utils._sympy.value_ranges import ValueRanges
    env = ShapeEnv()
    symbol = env.create_symbol(8, ConstantSource("n"), constraint_dim=StrictMinMaxConstraint(
        vr=ValueRanges(lo, 12), warn_only=False))
    n = env.create_symintnode(symbol, hint=8)
    with FakeTensorMode(shape_env=env):
        x_val = torch.empty(2, n)
    g = torch.fx.Graph()
    x, end = g.placeholder("x"), g.placeholder("end")
    x.meta["val"], end.meta["val"] = x_val, n - 5
    return x, end


class _At8:
    """The concrete point a lowering reads: n = 8."""

    def arg(self, v):
        return 3

    def shape(self, v):
        return [2, 8]


def test_slice_bound_relative_to_the_end_only_where_it_cannot_be_negative():
    """``x[:, :n - 5]``: ONNX's end -5 is ATen's n - 5 only while n - 5 >= 0 (ATen reads a negative end from the
    end: at n = 4, -1 means 3 rows, ONNX's -5 clamps to 0). With n >= 6 the bound is -5 at every size; with n
    possibly 2 the lowering keeps this shape's number (and the ranged comparison keeps engines per shape)."""
    from hybrid_trt.lowerings.ops import _dims
    x = torch.randn(2, 4)
    assert torch.equal(x[:, : 4 - 5], x[:, :3])  # ATen's reading of a negative end
    x_node, end_node = _slice_inputs(6)
    assert _dims.slice_bound(_At8(), x_node, 1, end_node) == -5
    x_node, end_node = _slice_inputs(2)
    assert _dims.slice_bound(_At8(), x_node, 1, end_node) is None


def test_fpn_resize_reads_its_sizes_from_the_lateral_map(tmp_path, monkeypatch):
    """The FPN step's Resize sizes come from the lateral map's shape (Shape -> Concat), not from a constant."""
    from hybrid_trt.engines import ranges
    lowered = []
    original = ranges.generic_model
    monkeypatch.setattr(ranges, "generic_model", lambda m, plan: lowered.append(original(m, plan)) or lowered[-1])
    _capture, _stitched, (runtime,) = _export_middle(TopDown().eval(), SPATIAL, tmp_path)
    assert runtime.ranged and lowered
    model = lowered[0]
    onnx.checker.check_model(model)
    resize = next(n for n in model.graph.node if n.op_type == "Resize")
    producers = {o: n.op_type for n in model.graph.node for o in n.output}
    assert producers.get(resize.input[3]) == "Concat", _ops(model)
    assert "Shape" in _ops(model)


class _Detector(nn.Module):
    """The constructs above in one partition, as a small detector head would have them: the FPN step, a crop
    from the end, a size-built coordinate ramp, a select from the end."""

    def __init__(self):
        super().__init__()
        self.fpn = TopDown()

    def forward(self, x):
        p = self.fpn(x)[0]
        ramp = torch.arange(p.shape[-1], dtype=p.dtype, device=p.device)
        return (p[:, :, 1:] * ramp + p[:, :, -1:], F.interpolate(p, scale_factor=2, mode="bilinear",
                                                                align_corners=True))


def test_export_package_one_engine_for_the_range(tmp_path):
    """hybrid_trt.export -> package (AOTInductor included) -> hybrid_trt.load: the partition has one engine for
    the declared range, no per-shape reason, and the loaded package matches eager at min, opt, max and an
    in-between shape it never listed."""
    import hybrid_trt
    torch.manual_seed(0)
    model = _Detector().eval()
    path = hybrid_trt.export(model, (torch.randn(2, 3, 8, 8),), dynamic_shapes=(SPATIAL,),
                             options={"num_threads": 1}, path=tmp_path / "pkg")
    loaded = hybrid_trt.load(path)
    (part,) = [p for p in loaded.manifest["partitions"]]
    assert part["ranges"] == ["[1..4]x3x[4..12]x[4..12]"] and part["per_shape_reason"] is None
    assert part["signatures"] == []
    for b, h, w in POINTS:
        x = torch.randn(b, 3, h, w)
        with torch.no_grad():
            got, expected = loaded(x), model(x)
        for g, e in zip(got, expected, strict=True):
            torch.testing.assert_close(g, e, msg=lambda m: f"at {(b, h, w)}: {m}")


def test_engine_for_a_range_remembers_a_bounded_number_of_shapes(tmp_path, monkeypatch):
    """A size that changes at every call (a point count) under a declared range: the engine for the range serves
    every shape, and its per-signature memo stops growing at the bound (it grew with every new shape)."""
    from hybrid_trt.engines import runtime as runtime_module
    monkeypatch.setattr(runtime_module, "_MEMO_LIMIT", 3, raising=False)
    factory, dynamic = CASES[sorted(CASES)[0]]
    torch.manual_seed(0)
    model = factory().eval()
    capture, stitched, (runtime,) = _export_middle(model, dynamic, tmp_path)
    for h in range(4, 13):
        x = torch.randn(1, 3, h, 16 - h)
        with torch.no_grad():
            for g, e in zip(_call(capture, stitched, x), model(x), strict=True):
                torch.testing.assert_close(g, e)
    assert len(runtime._engines) == 3
    assert [r.signature for r in runtime.report.engines] == ["range [1..4]x3x[4..12]x[4..12]"]
