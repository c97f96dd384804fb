"""Symbolic shapes: dynamic=True and Dynamo's automatic dynamic shapes. Engines are built lazily per concrete
shape, a seen shape reuses its engine, and past max_engines_per_partition new shapes run through Inductor."""
import logging

import pytest
import torch
import torch.nn as nn

import hybrid_trt
from examples.models import build

from _helpers import assert_close


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 4, 3, stride=2, padding=1)

    def forward(self, x):
        y = self.conv2(torch.relu(self.bn(self.conv1(x))))
        b = y.shape[0]
        return torch.softmax(y.reshape(b, -1), dim=-1)


def _engines(report):
    return [len(p.engines) for p in report.partitions]


def _check(compiled, model, x):
    with torch.no_grad():
        assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-5, what=f"batch {x.shape[0]}")


def test_dynamic_true_builds_engines_lazily_per_shape():
    model = ConvNet().eval()
    compiled = torch.compile(model, backend="hybrid_trt", dynamic=True)
    _check(compiled, model, torch.randn(2, 3, 8, 8))
    report = hybrid_trt.last_report()
    assert len(report.partitions) == 1 and report.partitions[0].status == "delegated", report.table()
    part = report.partitions[0]
    assert any(isinstance(d, str) for d in part.input_shapes[0]), part.input_shapes  # symbolic batch
    assert _engines(report) == [1]
    _check(compiled, model, torch.randn(3, 3, 8, 8))
    assert _engines(report) == [2]
    _check(compiled, model, torch.randn(5, 3, 8, 8))
    assert _engines(report) == [3]
    _check(compiled, model, torch.randn(3, 3, 8, 8))  # seen shape: no new build
    _check(compiled, model, torch.randn(2, 3, 8, 8))
    assert _engines(report) == [3]
    assert [e.signature.split(",")[0].split(" ")[0] for e in part.engines] == ["2x3x8x8", "3x3x8x8", "5x3x8x8"]
    assert hybrid_trt.last_report() is report  # no recompilation


def test_automatic_dynamic_shapes():
    model, x = build("transformer", small=True)
    compiled = torch.compile(model, backend="hybrid_trt")
    n_before = len(hybrid_trt.reports())
    _check(compiled, model, x)  # static graph, engine built at compile time
    static = hybrid_trt.last_report()
    assert _engines(static) == [1] and static.partitions[0].input_shapes == [[2, 16, 32]]
    _check(compiled, model, torch.randn(3, 16, 32))  # second distinct shape: Dynamo recompiles symbolically
    dynamic = hybrid_trt.last_report()
    assert dynamic is not static and len(hybrid_trt.reports()) == n_before + 2
    assert len(dynamic.partitions) == 1 and dynamic.partitions[0].status == "delegated", dynamic.table()
    assert any(isinstance(d, str) for d in dynamic.partitions[0].input_shapes[0])
    assert _engines(dynamic) == [1]
    _check(compiled, model, torch.randn(4, 16, 32))  # third shape: same graph, one more engine
    assert hybrid_trt.last_report() is dynamic and _engines(dynamic) == [2]
    _check(compiled, model, torch.randn(3, 16, 32))
    assert _engines(dynamic) == [2]
    _check(compiled, model, x)  # the original shape still runs (static graph or a dynamic engine)
    assert _engines(static) == [1]


def test_engine_bound_routes_new_shapes_through_inductor(caplog):
    caplog.set_level(logging.WARNING, logger="hybrid_trt")
    model = ConvNet().eval()
    compiled = torch.compile(model, backend="hybrid_trt", dynamic=True,
                             options={"max_engines_per_partition": 2})
    _check(compiled, model, torch.randn(2, 3, 8, 8))  # (batch 1 would be specialised by Dynamo)
    _check(compiled, model, torch.randn(3, 3, 8, 8))
    report = hybrid_trt.last_report()
    part = report.partitions[0]
    assert _engines(report) == [2] and part.events == []
    _check(compiled, model, torch.randn(4, 3, 8, 8))  # past the bound: Inductor, output still correct
    assert _engines(report) == [2]
    assert len(part.events) == 1 and "engine bound 2 reached" in part.events[0] and "4x3x8x8" in part.events[0]
    assert "Inductor" in part.events[0] and "engine bound 2 reached" in report.table()
    warned = [r.getMessage() for r in caplog.records if "max_engines_per_partition=2" in r.getMessage()]
    assert len(warned) == 1 and "mark_dynamic(x, dim, min=..., max=...)" in warned[0], warned  # what to do
    _check(compiled, model, torch.randn(4, 3, 8, 8))  # repeated: no new event, no build
    _check(compiled, model, torch.randn(2, 3, 8, 8))  # an engine shape still uses its engine
    assert _engines(report) == [2] and len(part.events) == 1
    assert part.status == "delegated"
    # Sizes that follow the data (Mask R-CNN resizes each detection's mask to its box) bring a new shape at
    # nearly every call: past the bound that is one event and one warning, not one per shape.
    for batch in (5, 6, 7):
        _check(compiled, model, torch.randn(batch, 3, 8, 8))
    assert _engines(report) == [2] and len(part.events) == 1, part.events
    assert sum("max_engines_per_partition=2" in r.getMessage() for r in caplog.records) == 1


class _TokenMixer(nn.Module):
    def __init__(self):
        super().__init__()
        self.q = nn.Linear(8, 8)

    def forward(self, x):
        b, n, c = x.shape  # n: the view's -1 below, h * w (h**2 in the trace for square inputs)
        return self.q(x).reshape(b, n, 2, -1).permute(0, 2, 1, 3).reshape(b, n, c) + x


class ShapeReadingBlock(nn.Module):
    """Sizes read from intermediate tensors (``b, h, w, c = x.shape``, then ``b, n, c = x.shape`` in a submodule), as
    PVT-v2's stages and attention do. The captured graph reads them with ``sym_size`` to feed the reshapes; each
    read used to pull the ops before it out of the block (a path from the block through the size node and back),
    so the model was cut into one partition per read."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.norm = nn.LayerNorm(8)
        self.mixer = _TokenMixer()

    def forward(self, x):
        x = self.norm(self.conv(x).permute(0, 2, 3, 1))
        b, h, w, c = x.shape
        x = self.mixer(x.reshape(b, -1, c))
        return x.transpose(1, 2).reshape(b, c, h, w).relu()


@pytest.mark.parametrize("extra_width", [2, 0], ids=["h_ne_w", "square"])
def test_sizes_read_from_intermediate_tensors_keep_the_block_whole(extra_width):
    model = ShapeReadingBlock().eval()
    compiled = torch.compile(model, backend="hybrid_trt", dynamic=True)
    for size in (16, 24, 13):
        _check(compiled, model, torch.randn(2, 3, size, size + extra_width))
    report = hybrid_trt.last_report()
    assert not report.inductor_ops and len(report.partitions) == 1, report.table()
    assert any(isinstance(d, str) for d in report.partitions[0].input_shapes[0]), report.table()  # symbolic sizes
    assert _engines(report) == [3]


class FourierPositions(nn.Module):
    """A DETR-style positional encoding (EdgeNeXt's): the running count of an all-ones mask as large as the feature
    map. With symbolic sizes the mask is no constant, so the bool cumsum must delegate or it splits the block."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.proj = nn.Conv2d(8, 4, 1)

    def forward(self, x):
        y = self.conv(x)
        b, c, h, w = y.shape
        mask = torch.ones(b, h, w, dtype=torch.bool, device=y.device)
        rows = mask.cumsum(1, dtype=torch.float32) / h
        cols = mask.cumsum(2) * 0.1  # int64 without dtype=
        return self.proj(y + (rows + cols).unsqueeze(1))


def test_bool_mask_cumsum_delegates_with_symbolic_sizes():
    model = FourierPositions().eval()
    compiled = torch.compile(model, backend="hybrid_trt", dynamic=True)
    for size in (8, 12):
        _check(compiled, model, torch.randn(2, 3, size, size + 1))
    report = hybrid_trt.last_report()
    assert not report.inductor_ops and len(report.partitions) == 1, report.table()
    assert report.partitions[0].ops.get("aten.cumsum.default") == 2, report.table()


class _ScaledResize(torch.nn.Module):
    """At dynamic=True, interpolate's nearest-exact with a size and a recomputed scale factor compute floats from
    the symbolic sizes (SymFloat): an engine takes sizes as integers, and its partition (the convolution too)
    failed its build and fell back whole."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(8, 4, 1)

    def forward(self, x):
        y = self.conv(x)
        return (torch.nn.functional.interpolate(y, size=(11, 5), mode="nearest-exact") * 2,
                torch.nn.functional.interpolate(y, scale_factor=1.7, mode="bilinear",
                                                recompute_scale_factor=True).relu())


def test_ops_reading_floats_of_symbolic_sizes_stay_with_inductor_and_the_rest_delegates():
    torch._dynamo.reset()
    model = _ScaledResize().eval()
    fast = torch.compile(model, backend="hybrid_trt", dynamic=True, options={"min_block_size": 1, "strict": True})
    with torch.no_grad():
        for shape in ((2, 8, 7, 9), (3, 8, 10, 6)):
            x = torch.randn(shape)
            for got, want in zip(fast(x), model(x)):
                torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    report = hybrid_trt.last_report()
    delegated = {op for p in report.partitions if p.status == "delegated" for op in p.ops}
    assert "aten.convolution.default" in delegated, report.table()
    assert any(r.reason == "reads a float computed from symbolic sizes" for r in report.inductor_ops), report.table()


def test_a_compile_dynamo_restarts_leaves_no_report():
    """With dynamic=True Dynamo can abandon the backend's first compile of a graph and call it again (it restarts
    to specialise a float it traced as a symbol): one graph compiled, one report, the delegated one."""
    class ConvNormHead(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.norm, self.fc = torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.LayerNorm(8), torch.nn.Linear(8, 4)

        def forward(self, x):
            t = torch.relu(self.conv(x)).flatten(2).transpose(1, 2)
            return self.fc(self.norm(t).mean(1))

    model = ConvNormHead().eval()
    x = torch.randn(2, 3, 16, 16)
    before = len(hybrid_trt.reports())
    torch._dynamo.utils.counters.clear()
    with torch.no_grad():
        out = torch.compile(model, backend="hybrid_trt", dynamic=True)(x)
        assert_close(out, model(x))
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 1
    new = hybrid_trt.reports()[before:]
    assert len(new) == 1, [r.table() for r in new]
    assert new[0].partitions and new[0].delegated_op_count == new[0].total_op_count, new[0].table()


class _FixedIndexRead(nn.Module):
    """Reads through index tensors held as buffers (constants of the partition): upsampling's x[:, :, rows, cols]
    and a pair a slice separates."""

    def __init__(self):
        super().__init__()
        self.register_buffer("rows", torch.tensor([2, 0, 3]).view(3, 1))
        self.register_buffer("cols", torch.tensor([4, 0]))

    def forward(self, x):
        y = torch.relu(x) * 2
        return y[:, :, self.rows, self.cols].sigmoid() + 1, y[self.cols, :, self.cols] * 3


def test_constant_index_tensors_lower_at_every_shape_after_a_warm_start():
    """A warm start loads the first shape's engine and, for each new batch size, lowers the partition's recipe read
    back from the store, whose constant index tensors carry no traced value: the lowering reads their shapes from
    the lowering context, so every new shape builds an engine (each fell back to Inductor before)."""
    model = _FixedIndexRead().eval()
    with torch.no_grad():
        torch.compile(model, backend="hybrid_trt", dynamic=True)(torch.randn(5, 3, 6, 6))  # cold: stores it
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="hybrid_trt", dynamic=True)
    for b in (5, 6, 8):
        x = torch.randn(b, 3, 6, 6)
        with torch.no_grad():
            for a, e in zip(compiled(x), model(x)):
                assert_close(a, e, rtol=1e-6, atol=1e-6, what=f"batch {b}")
    report = hybrid_trt.last_report()
    assert [sorted(e.source for e in p.engines) for p in report.partitions] == [["built", "built", "loaded"]], \
        report.table()
    assert not report.inductor_ops, report.table()
    assert all(p.status == "delegated" and not p.shapes_on_inductor for p in report.partitions), report.table()


_BOUND_CHILD = """
import json, sys, torch
sys.path[:0] = [{tests!r}, {root!r}]
import hybrid_trt
from test_dynamic_shapes import ConvNet
torch.manual_seed(0)
model = ConvNet().eval()
compiled = torch.compile(model, backend="hybrid_trt", dynamic=True,
                         options={{"max_engines_per_partition": 2, "cache_dir": {cache!r}}})
with torch.no_grad():
    for batch in {batches!r}:
        x = torch.randn(batch, 3, 8, 8)
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-4)
part = hybrid_trt.last_report().partitions[0]
print(json.dumps({{"engines": [e.source for e in part.engines], "events": part.events}}))
"""


def test_engine_bound_counts_engines_loaded_from_the_store(tmp_path):
    """A second process on the same cache directory holds at most ``max_engines_per_partition`` engines too: the
    ones it loads count. Uncounted, each process served every shape earlier processes had stored and built as many
    again, so the store and each process's memory grew with every run of a model whose shapes follow the data."""
    import json
    import os
    import subprocess
    import sys
    tests = os.path.dirname(os.path.abspath(__file__))

    def run(batches):
        code = _BOUND_CHILD.format(tests=tests, root=os.path.dirname(tests), cache=str(tmp_path / "cache"),
                                   batches=batches)
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stderr[-3000:]
        return json.loads(out.stdout.strip().splitlines()[-1])

    first = run([2, 3, 4])
    assert first["engines"] == ["built", "built"] and len(first["events"]) == 1, first
    second = run([2, 3, 4, 5])
    assert second["engines"] == ["loaded", "loaded"], second  # nothing built past the bound
    assert len(second["events"]) == 1 and "engine bound 2 reached" in second["events"][0], second
    assert "4x3x8x8" in second["events"][0], second
