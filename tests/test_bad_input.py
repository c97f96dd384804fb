"""Inputs and environments a deployment meets that the model was not compiled for (issue 7, "Bad input").

A compiled model called with another batch, rank, dtype or device recompiles or raises the error eager raises,
never returns wrong numbers; unusual layouts, empty batches and non-finite values behave as in eager; two
threads share one compiled model; inference mode is no-grad mode; and a missing or broken delegate library
leaves Inductor with one clear warning (checked in real subprocesses with a fake broken package).
"""
import json
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import hybrid_trt
from _helpers import assert_close, run_in_threads

ROOT = pathlib.Path(__file__).resolve().parents[1]


class ConvNet(nn.Module):
    """Conv, batch norm, pooling, linear, softmax: one delegated partition on ONNX Runtime."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.c2 = nn.Conv2d(8, 16, 3, padding=1)
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        x = F.max_pool2d(torch.relu(self.bn(self.c1(x))), 2)
        x = torch.relu(self.c2(x)).mean((-2, -1))
        return torch.softmax(self.fc(x), -1)


class TokenMLP(nn.Module):
    """Layer norm, linear, GELU, softmax over the last dimension: works on inputs of any rank >= 1."""

    def __init__(self):
        super().__init__()
        self.ln, self.l1, self.l2 = nn.LayerNorm(16), nn.Linear(16, 32), nn.Linear(32, 16)

    def forward(self, x):
        return torch.softmax(self.l2(F.gelu(self.l1(self.ln(x)))), -1) + x


def _model(cls, device="cpu"):
    torch.manual_seed(0)
    m = cls().eval().to(device)
    if isinstance(m, ConvNet):  # non-trivial batch-norm statistics
        m.bn.running_mean.uniform_(-0.5, 0.5)
        m.bn.running_var.uniform_(0.5, 2.0)
    return m


def _delegated(graphs_before: int) -> int:
    return sum(r.delegated_op_count for r in hybrid_trt.reports()[graphs_before:])


# -- shapes, dtypes, devices ------------------------------------------------------------------------------------
def _fallbacks(caplog) -> list:
    return [r.getMessage() for r in caplog.records if r.name == "hybrid_trt" and "falls back" in r.getMessage()]


def test_other_batch_sizes_recompile_and_match(hybrid_logs):
    model = _model(ConvNet)
    before = len(hybrid_trt.reports())
    with torch.no_grad():
        fast = torch.compile(model, backend="hybrid_trt")
        for batch in (2, 5, 3, 1, 2):
            x = torch.randn(batch, 3, 16, 16)
            assert_close(fast(x), model(x), what=f"batch {batch}")
    assert _delegated(before) > 0, "the first graph should delegate; else this test checks Inductor alone"
    assert not _fallbacks(hybrid_logs)  # new batch sizes get engines of their own, not Inductor


def test_other_ranks_recompile_and_match():
    model = _model(TokenMLP)
    with torch.no_grad():
        fast = torch.compile(model, backend="hybrid_trt")
        for shape in ((2, 5, 16), (5, 16), (3, 2, 5, 16), (16,)):
            x = torch.randn(shape)
            assert_close(fast(x), model(x), what=f"input {shape}")


def test_rank_eager_rejects_raises_the_same_error():
    model = _model(ConvNet)
    with torch.no_grad():
        fast = torch.compile(model, backend="hybrid_trt")
        fast(torch.randn(2, 3, 16, 16))
        with pytest.raises(ValueError, match="expected 4D input"):
            model(torch.randn(3, 16, 16))
        with pytest.raises(ValueError, match="expected 4D input"):
            fast(torch.randn(3, 16, 16))


def test_other_dtypes_recompile_and_match():
    def fn(x):  # no weights, so every dtype is valid input
        h = F.layer_norm(x, x.shape[-1:])
        return torch.softmax(h @ h.transpose(-1, -2), -1) @ h + torch.sigmoid(x)

    with torch.no_grad():
        fast = torch.compile(fn, backend="hybrid_trt")
        x = torch.randn(2, 6, 8)
        for dtype, tol in ((torch.float32, 1e-4), (torch.float64, 1e-9), (torch.bfloat16, 2e-2),
                           (torch.float32, 1e-4)):
            xd = x.to(dtype)
            assert_close(fast(xd), fn(xd), rtol=tol, atol=tol, what=str(dtype))


@pytest.mark.parametrize("dtype,reason", [(torch.bfloat16, "dtype bfloat16 not supported"),
                                          (torch.float16, "dtype float16 not supported on the CPU provider")])
def test_a_graph_declined_whole_for_its_dtype_says_so_once(hybrid_logs, dtype, reason):
    """A bfloat16 or float16 model on the CPU: no op is delegated (ONNX Runtime's CPU provider lacks their kernels),
    the model runs as plain Inductor and matches eager, and one warning says why instead of the report alone. A
    float32 compile of the same model, fully delegated, warns nothing."""
    model = _model(ConvNet)
    x = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        expected = model(x)
        assert_close(torch.compile(model, backend="hybrid_trt")(x), expected)
        assert not [r for r in hybrid_logs.records if "no op delegated" in r.getMessage()]
        torch._dynamo.reset()
        half = _model(ConvNet).to(dtype)
        xb = x.to(dtype)
        assert_close(torch.compile(half, backend="hybrid_trt")(xb), half(xb), rtol=2e-2, atol=2e-2)
    warned = [r.getMessage() for r in hybrid_logs.records if "no op delegated" in r.getMessage()]
    assert len(warned) == 1 and reason in warned[0], warned
    assert not hybrid_trt.last_report().partitions


def test_dtype_the_weights_reject_raises_the_same_error():
    model = _model(ConvNet)
    x = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        fast = torch.compile(model, backend="hybrid_trt")
        fast(x)
        with pytest.raises(RuntimeError, match="should be the same"):
            model(x.double())
        with pytest.raises(RuntimeError, match="should be the same"):
            fast(x.double())


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_other_device_recompiles_or_raises():
    model = _model(ConvNet)
    x = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        fast = torch.compile(model, backend="hybrid_trt")
        assert_close(fast(x), model(x), what="cpu")
        with pytest.raises(RuntimeError):  # CPU weights, CUDA input: eager raises, so must the compiled model
            fast(x.cuda())
        model.cuda()
        assert_close(fast(x.cuda()), model(x.cuda()), what="cuda after model.cuda()")
        model.cpu()
        assert_close(fast(x), model(x), what="back on cpu")


# -- layouts, empty and non-finite inputs -------------------------------------------------------------------------
@pytest.mark.parametrize("layout", ["transposed", "strided", "channels_last", "channels_last_model", "offset"])
def test_layouts_match_eager(layout):
    model = _model(ConvNet)
    base = torch.randn(2, 3, 32, 32)
    x = {"transposed": base[:, :, :16, :16].transpose(2, 3),
         "strided": base[:, :, ::2, ::2],
         "channels_last": base[:, :, :16, :16].contiguous(memory_format=torch.channels_last),
         "channels_last_model": base[:, :, :16, :16].contiguous(memory_format=torch.channels_last),
         "offset": base.flatten()[7:7 + 2 * 3 * 16 * 16].view(2, 3, 16, 16)}[layout]
    if layout == "channels_last_model":
        model = model.to(memory_format=torch.channels_last)
    before = len(hybrid_trt.reports())
    with torch.no_grad():
        fast = torch.compile(model, backend="hybrid_trt")
        contiguous = torch.randn(2, 3, 16, 16)
        assert_close(fast(contiguous), model(contiguous), what="contiguous")
        assert_close(fast(x), model(x), what=layout)
        assert_close(fast(x.clone()), model(x), what=f"{layout}, a second call")
    assert _delegated(before) > 0


class FeatureMapNet(nn.Module):
    """Returns feature maps, one of them through a view: their strides follow the input's memory format."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, padding=1)
        self.c2 = nn.Conv2d(8, 8, 3, padding=1)

    def forward(self, x):
        y = self.c2(torch.relu(self.c1(x)))
        return y, y.permute(0, 2, 3, 1), y.mean((-2, -1))


@pytest.mark.parametrize("dynamic", [False, True])
@pytest.mark.parametrize("layout", ["channels_last", "contiguous"])
def test_returned_feature_maps_keep_eager_strides(layout, dynamic):
    """A delegate returns contiguous tensors; the graph's outputs get their traced strides back, so a
    channels-last input gives channels-last outputs, as in eager mode and under Inductor (with dynamic shapes
    too, where the strides are symbolic)."""
    model = _model(FeatureMapNet)
    before = len(hybrid_trt.reports())
    fast = torch.compile(model, backend="hybrid_trt", dynamic=dynamic)
    for batch in (2, 3):
        x = torch.randn(batch, 3, 16, 16)
        if layout == "channels_last":
            x = x.contiguous(memory_format=torch.channels_last)
        with torch.no_grad():
            expected, got = model(x), fast(x)
        assert_close(got, expected, what=f"{layout}, batch {batch}")
        for i, (g, e) in enumerate(zip(got, expected)):
            assert g.stride() == e.stride(), f"batch {batch}, output {i}: strides {g.stride()} != eager's {e.stride()}"
        if layout == "channels_last":
            assert got[0].is_contiguous(memory_format=torch.channels_last) and not got[0].is_contiguous()
    assert _delegated(before) > 0


def test_outputs_inductor_computes_keep_eager_strides():
    """With nothing delegated, the graph Inductor compiles is the re-traced one: it must still carry the output
    strides Inductor keeps, or its layout optimisation returns a convolution's output channels-last."""
    model = _model(FeatureMapNet)
    x = torch.randn(2, 3, 16, 16)
    before = len(hybrid_trt.reports())
    with torch.no_grad():
        expected = model(x)
        got = torch.compile(model, backend="hybrid_trt", options={"min_block_size": 1000})(x)
    assert _delegated(before) == 0
    assert_close(got, expected, what="nothing delegated")
    for i, (g, e) in enumerate(zip(got, expected)):
        assert g.stride() == e.stride(), f"output {i}: strides {g.stride()} != eager's {e.stride()}"


class SliceNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.c = nn.Conv2d(3, 8, 3, padding=1)

    def forward(self, x):
        return self.c(x)[:, :, ::2]  # a returned slice: its traced strides need the storage around it


def test_returned_slice_of_a_delegate_output_matches_eager():
    model = _model(SliceNet)
    x = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        assert_close(torch.compile(model, backend="hybrid_trt")(x), model(x), what="sliced output")


def test_zero_batch_matches_eager():
    model = _model(ConvNet)
    with torch.no_grad():
        empty = torch.randn(0, 3, 16, 16)
        assert_close(torch.compile(model, backend="hybrid_trt")(empty), model(empty), what="compiled for batch 0")
        torch._dynamo.reset()
        fast = torch.compile(model, backend="hybrid_trt")
        x = torch.randn(2, 3, 16, 16)
        assert_close(fast(x), model(x), what="batch 2")
        assert_close(fast(empty), model(empty), what="batch 0 after batch 2")
        assert_close(fast(x), model(x), what="batch 2 again")


def _non_finite(shape):
    torch.manual_seed(1)
    x = torch.randn(shape)
    flat = x.view(-1)
    flat[3], flat[40], flat[77], flat[-5] = float("nan"), float("inf"), -float("inf"), float("nan")
    return x


_CONV = nn.Conv2d(3, 4, 1)


def _conv_act(x):
    h = _CONV(x)
    return torch.softmax(torch.relu(h) + torch.sigmoid(h) * F.hardswish(h), 1)


# ONNX Runtime's MaxPool, ReduceMax and ArgMax alone drop a NaN depending on its position in the window; the
# lowerings select NaN (argmax: the first NaN's index) where the window's NaN mask is set, as torch does.
@pytest.mark.parametrize("fn", [
    pytest.param(_conv_act, id="conv_activations_softmax"),
    pytest.param(lambda x: torch.tanh(_CONV(x)).mean((-2, -1)) * 3 - 1, id="conv_mean"),
    pytest.param(lambda x: F.max_pool2d(_CONV(x), 2) + 1, id="max_pool"),
    pytest.param(lambda x: F.max_pool2d(_CONV(x), 3, 2, 1) + 1, id="max_pool_padded"),
    pytest.param(lambda x: torch.amax(_CONV(x), dim=(-2, -1)) + 1, id="amax"),
    pytest.param(lambda x: torch.amin(_CONV(x), dim=-1) + 1, id="amin"),
    pytest.param(lambda x: torch.argmax(_CONV(x).flatten(1), 1) + 1, id="argmax"),
    pytest.param(lambda x: torch.argmin(_CONV(x).flatten(2), 2) + 1, id="argmin"),
    pytest.param(lambda x: torch.max(_CONV(x), -1)[1] + 1, id="max_dim_indices"),
    pytest.param(lambda x: torch.min(_CONV(x), -1)[0] + 1, id="min_dim_values"),
])
def test_nan_and_inf_inputs_match_eager(fn):
    x = _non_finite((2, 3, 8, 8))
    before = len(hybrid_trt.reports())
    with torch.no_grad():
        out = torch.compile(fn, backend="hybrid_trt", options={"min_block_size": 1})(x)
        ref = fn(x)
    assert _delegated(before) > 0
    assert not torch.isfinite(ref).all() or ref.dtype == torch.int64, "the input should reach the output"
    assert_close(out, ref, what="non-finite input")


def test_outputs_that_view_each_other_share_memory_as_in_eager():
    """``return y, y.flatten(1)``: eager's second output is a view of the first (an in-place change to one shows in
    the other). A delegate returned both from one engine, as two buffers; the view now stays with Inductor, which
    makes it a view of the delegate's output, and the rest of the graph is still delegated."""
    conv = _model(ConvNet).c1

    def fn(x):
        y = torch.relu(conv(x))
        return y, y.flatten(1), y.flatten(1).t()

    x = torch.randn(2, 3, 8, 8)
    before = len(hybrid_trt.reports())
    with torch.no_grad():
        ref = fn(x)
        out = torch.compile(fn, backend="hybrid_trt", options={"min_block_size": 1})(x)
    assert_close(out, ref)
    assert _delegated(before) > 0
    out[0].add_(1)
    assert_close(out[1], out[0].flatten(1), what="the view after an in-place change to its base")
    assert_close(out[2], out[0].flatten(1).t(), what="a view of the view")



def _report_since(before: int):
    reports = hybrid_trt.reports()[before:]
    assert len(reports) == 1, [r.table() for r in reports]
    return reports[0]


def _eager_and_hybrid(fn, x):
    """``fn(x)`` in eager mode and compiled (``min_block_size=1``), under no_grad, with the compile's one report."""
    before = len(hybrid_trt.reports())
    with torch.no_grad():
        ref = fn(x)
        out = torch.compile(fn, backend="hybrid_trt", options={"min_block_size": 1})(x)
    return ref, out, _report_since(before)


def _assert_views_like_eager(out, ref):
    """Values, strides and offsets as in eager, and every output after the first in the first one's storage."""
    assert_close(out, ref)
    for i, (o, r) in enumerate(zip(out, ref)):
        assert (o.stride(), o.storage_offset()) == (r.stride(), r.storage_offset()), f"output {i}"
        if i:
            assert o.untyped_storage().data_ptr() == out[0].untyped_storage().data_ptr(), f"output {i} is no view"


@pytest.mark.parametrize("split", [
    pytest.param(lambda y: y.split(4, 1), id="split"),
    pytest.param(lambda y: y.unbind(1), id="unbind"),
    pytest.param(lambda y: y.chunk(2, 1), id="chunk"),
])
def test_pieces_of_a_split_returned_with_their_base_are_views_as_in_eager(split):
    """``return y, *y.split(4, 1)``: eager's pieces are views of ``y``. The delegate returned them as buffers of
    their own; the split (with the getitems that unpack it) now stays with Inductor, which makes them views of
    the delegate's ``y``, and ``y`` itself stays delegated."""
    conv = _model(ConvNet).c1

    def fn(x):
        y = torch.relu(conv(x))
        return (y, *split(y))

    x = torch.randn(2, 3, 4, 4)
    ref, out, report = _eager_and_hybrid(fn, x)
    _assert_views_like_eager(out, ref)
    assert [sorted(p.ops) for p in report.partitions] == [["aten.convolution.default", "aten.relu.default"]]
    assert [op.reason for op in report.inductor_ops] == \
        ["onnxruntime: a view returned with the tensor it views; Inductor keeps it a view of that output"]


@pytest.mark.parametrize("use", [
    pytest.param(lambda y: y.split(2, 1), id="returned_split"),
    pytest.param(lambda y: torch.as_strided(y.unbind(1)[0], (2, 4), (1, 2)), id="storage_read_of_an_unbind_item"),
])
def test_traced_strides_are_kept_through_the_items_of_a_split(use):
    """A delegate output that reaches the graph's output or a storage reader only through the items of a view
    list (split, unbind) gets its traced strides back too (the items were not followed)."""
    from torch.fx.experimental.proxy_tensor import make_fx
    from hybrid_trt.stitch.layout import keep_traced_strides

    gm = make_fx(lambda x: use(torch.relu(x.permute(0, 2, 3, 1))), tracing_mode="fake")(torch.randn(2, 4, 4, 4))
    relu = next(n for n in gm.graph.nodes if n.target is torch.ops.aten.relu.default)
    assert not relu.meta["val"].is_contiguous()
    assert keep_traced_strides(gm, [relu.args[0], relu], [relu]) == 1


@pytest.mark.parametrize("view", [
    pytest.param(lambda y: y[:, None].expand(2, 3, 8, 4, 4), id="expand"),
    pytest.param(lambda y: y[:, ::2], id="slice_with_gaps"),
    pytest.param(lambda y: y[..., 1:3], id="narrow_last_dim"),
])
def test_a_returned_view_no_buffer_can_hold_comes_back_a_view_as_in_eager(view):
    """A returned expand (stride 0) or gapped slice of a delegate output: eager gives a view with those strides;
    the delegate could give only a compact copy. The view stays with Inductor, which makes it a view of the
    delegate's output, so strides match eager, and the computation stays delegated."""
    conv = _model(ConvNet).c1

    def fn(x):
        return view(torch.relu(conv(x)))

    x = torch.randn(2, 3, 4, 4)
    ref, out, report = _eager_and_hybrid(fn, x)
    assert_close(out, ref)
    assert out.stride() == ref.stride()
    assert len(report.partitions) == 1
    assert {"aten.convolution.default", "aten.relu.default"} <= set(report.partitions[0].ops)
    left = [(op.op, op.reason) for op in report.inductor_ops]
    assert len(left) == 1 and "returned with strides a delegate output cannot have" in left[0][1], left


def test_storage_read_of_an_unbind_item_matches_eager():
    """``as_strided`` of one item of ``y.unbind(2)``: the item (offset and gaps in ``y``'s storage) left the
    partition alone, the partition builder took it back as an output of the unbind, and the stitcher gave it
    its traced strides with ``copy_strided``, leaving the gaps uninitialised (wrong values, also before the
    storage-read rule). The unbind now leaves with all its items, and Inductor makes them views of ``y``."""
    torch.manual_seed(0)
    lin = nn.Linear(3, 3).eval()

    def fn(x):
        y = torch.relu(lin(x))
        return torch.as_strided(y.unbind(2)[1], (2, 4), (1, 2), 0) + 0

    x = torch.randn(2, 4, 3)
    ref, out, report = _eager_and_hybrid(fn, x)
    assert_close(out, ref)
    assert report.delegated_op_count > 0
    left = {op.op: op.reason for op in report.inductor_ops}
    assert "its storage is read" in left.get("aten.unbind.int", ""), left


def _expanded_read_through_storage(lin):
    def fn(x):
        y = torch.relu(lin(x))[:, None].expand(4, 3, 8)  # stride 0 in dim 1
        return torch.as_strided(y, (4, 2, 8), (8, 0, 1)), torch.as_strided(y.transpose(1, 2), (4, 8, 2), (8, 1, 0)) * 2
    return fn


@pytest.mark.parametrize("inductor", ["compiles", "fails"])
def test_storage_read_of_an_expanded_delegate_output_matches_eager(inductor, monkeypatch):
    """``as_strided`` of ``y.expand(...)``: the delegate's output got its traced strides back with
    ``copy_strided``, which cannot write an expand's stride 0, so the graph failed at run time wherever the
    stitched graph runs without Inductor (the last step of the fallback ladder). The expand (and the transpose
    after it) now stay with Inductor, which makes them views of the delegate's dense output."""
    if inductor == "fails":
        import hybrid_trt.backend as backend

        def failing(*args, **kwargs):
            raise RuntimeError("injected Inductor failure")
        monkeypatch.setattr(backend, "compile_fx_inner", failing)
    torch.manual_seed(0)
    fn = _expanded_read_through_storage(nn.Linear(8, 8).eval())
    x = torch.randn(4, 8)
    ref, out, report = _eager_and_hybrid(fn, x)
    assert_close(out, ref)
    assert [o.stride() for o in out] == [r.stride() for r in ref]
    assert report.delegated_op_count > 0
    left = {op.op: op.reason for op in report.inductor_ops}
    assert "its storage is read" in left["aten.expand.default"], left
    assert "aten.unsqueeze.default" not in left, "the view the expand is made of needs no storage of its own"


# -- concurrency and grad modes -----------------------------------------------------------------------------------
@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_two_threads_share_one_compiled_model(dynamic, hybrid_logs):
    model = _model(ConvNet)
    # dynamic: each thread calls with its own batch size, so engines for new shapes are built while the other
    # thread runs (static: both threads run the one engine at the same time).
    inputs = [torch.randn(2 if not dynamic else 2 + t, 3, 16, 16) for t in range(2)]
    with torch.no_grad():
        refs = [model(x) for x in inputs]
        fast = torch.compile(model, backend="hybrid_trt", dynamic=dynamic or None)
        fast(torch.randn(4, 3, 16, 16) if dynamic else inputs[0])  # compiled before the threads start
    def worker(t):
        with torch.no_grad():
            for i in range(20):
                assert_close(fast(inputs[t]), refs[t], what=f"thread {t} call {i}")
    run_in_threads(worker)
    assert not _fallbacks(hybrid_logs)


def test_inference_mode_behaves_as_no_grad():
    model = _model(ConvNet)
    x = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        ref = model(x)
        before = len(hybrid_trt.reports())
        out_nograd = torch.compile(model, backend="hybrid_trt")(x)
        nograd = hybrid_trt.reports()[before:]
    torch._dynamo.reset()
    with torch.inference_mode():
        before = len(hybrid_trt.reports())
        fast = torch.compile(model, backend="hybrid_trt")
        out_inference = fast(x)
        inference = hybrid_trt.reports()[before:]
        out_again = fast(x.clone())
    assert_close(out_nograd, ref, what="no_grad")
    assert_close(out_inference, ref, what="inference_mode")
    assert_close(out_again, ref, what="inference_mode, second call")
    assert [r.whole_graph_reason for r in inference] == [None] * len(inference)
    assert [(r.delegated_op_count, len(r.partitions)) for r in inference] == \
        [(r.delegated_op_count, len(r.partitions)) for r in nograd]
    assert sum(r.delegated_op_count for r in inference) > 0
    with torch.no_grad():  # the model compiled under inference mode, now called under no_grad
        assert_close(fast(x), ref, what="no_grad after inference_mode")


def test_autocast_after_a_float32_compile_matches_eager():
    """Dynamo's graph is the same code under torch.autocast; the casts appear only when AOTAutograd traces it. The
    float32 compile stored a graph entry that the autocast compile of the same model was then served: float32
    engines, float32 outputs where eager gives bfloat16."""
    model = _model(ConvNet)
    x = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        fast = torch.compile(model, backend="hybrid_trt")
        assert_close(fast(x), model(x), what="float32")
        with torch.autocast("cpu", dtype=torch.bfloat16):
            ref = model(x)
            assert ref.dtype == torch.bfloat16
            assert_close(fast(x), ref, rtol=2e-2, atol=2e-2, what="under autocast")
        assert_close(fast(x), model(x), what="float32 again")


# -- a delegate library that is missing or broken -----------------------------------------------------------------
_BROKEN = {
    # sitecustomize makes the path finder not see the package, exactly as if it were not installed
    "missing": ("sitecustomize.py", textwrap.dedent("""
        import importlib.machinery, sys
        class _Hidden(importlib.machinery.PathFinder):
            @classmethod
            def find_spec(cls, name, path=None, target=None):
                if name.split(".")[0] == "onnxruntime":
                    return None
                return super().find_spec(name, path, target)
        sys.meta_path[:] = [_Hidden if f is importlib.machinery.PathFinder else f for f in sys.meta_path]
        """), "onnxruntime is not installed"),
    "raises_at_import": ("onnxruntime/__init__.py", "raise RuntimeError('simulated: CUDA provider ABI mismatch')\n",
                         "simulated: CUDA provider ABI mismatch"),
    "native_library_missing": ("onnxruntime/__init__.py",
                               "from onnxruntime.capi import _pybind_state  # the package ships no capi here\n",
                               "onnxruntime.capi"),
    "empty_package": ("onnxruntime/__init__.py", "", "no InferenceSession"),
}

_CHILD = textwrap.dedent("""
    import json, logging, sys
    import torch
    sys.path.insert(0, {tests!r})
    import hybrid_trt
    from test_bad_input import TokenMLP, _model
    records = []
    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())
    handler = Keep(logging.WARNING)
    logging.getLogger("hybrid_trt").addHandler(handler)
    results = []
    with torch.no_grad():  # two graphs: the warning comes once per process, not per graph
        for model in (_model(TokenMLP), lambda x: torch.softmax(x * 2 + 1, -1).sum(0)):
            x = torch.randn(2, 5, 16)
            out = torch.compile(model, backend="hybrid_trt", options={options!r})(x)
            results.append(bool(torch.allclose(out, model(x), rtol=1e-4, atol=1e-4)))
    reports = hybrid_trt.reports()
    print("RESULT" + json.dumps({{"match": results, "warnings": records, "graphs": len(reports),
                                 "delegated": sum(r.delegated_op_count for r in reports),
                                 "inductor_ops": sum(len(r.inductor_ops) for r in reports)}}))
""")


def _compile_with_broken_onnxruntime(case, tmp_path, options):
    rel, source, cause = _BROKEN[case]
    path = tmp_path / "site" / rel
    path.parent.mkdir(parents=True)
    path.write_text(source)
    # Inductor's cache is the test run's (conftest.py): the C++ compiled once serves every broken-package case
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path / "site"), str(ROOT)]))
    env.pop("HYBRID_TRT_DELEGATES", None)
    proc = subprocess.run([sys.executable, "-c", _CHILD.format(tests=str(ROOT / "tests"), options=options)],
                          env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT")), None)
    assert proc.returncode == 0 and line, f"child failed ({proc.returncode}):\n{proc.stderr[-3000:]}"
    res = json.loads(line[len("RESULT"):])
    assert res["match"] == [True, True]
    assert res["graphs"] == 2 and res["delegated"] == 0 and res["inductor_ops"] > 0
    assert len(res["warnings"]) == 1, res["warnings"]
    warning = res["warnings"][0]
    assert "onnxruntime" in warning and cause in warning, warning
    return warning


@pytest.mark.parametrize("case", sorted(_BROKEN))
def test_missing_or_broken_onnxruntime_compiles_with_inductor_and_one_warning(case, tmp_path):
    warning = _compile_with_broken_onnxruntime(case, tmp_path, {})
    assert "no delegate is usable" in warning and "Inductor" in warning, warning


def test_a_broken_delegate_named_in_the_options_compiles_with_inductor_and_one_warning(tmp_path):
    """Named in ``delegates`` (not strict), a delegate whose library fails at import failed every compile; now as
    when no delegate is named: Inductor alone, one warning per process with the cause."""
    warning = _compile_with_broken_onnxruntime("raises_at_import", tmp_path, {"delegates": ["onnxruntime"]})
    assert "'onnxruntime' is not usable here" in warning and "Inductor alone" in warning, warning
