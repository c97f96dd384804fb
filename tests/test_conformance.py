"""CPU subset of the conformance suite (benchmarks/conformance.py): models nobody here designed, random weights,
tiny inputs, compiled with default options; each must match eager with no fallback at build or run time.

One classifier family per kind of block (residual convs, depthwise + squeeze-excite + hardswish, ConvNeXt's
channels-last layer norms, a ViT's attention), a segmentation model (its upsampling), and a detector (graph
breaks, NMS, data-dependent sizes). The full table, with latency, comes from the script.
"""
import logging
import pathlib
import sys

import pytest
import torch

import hybrid_trt

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "benchmarks"))
import conformance  # noqa: E402

pytest.importorskip("torchvision")
pytest.importorskip("timm")

CASES = [
    conformance._tv("resnet18", size=32),
    conformance._tv("mobilenet_v3_small", size=32),
    conformance._timm("convnext_atto", size=32),
    conformance._timm("vit_tiny_patch16_224", size=32, img_size=32),
    conformance._tv_seg("lraspp_mobilenet_v3_large", size=64),
    conformance._tv_det("fasterrcnn_mobilenet_v3_large_320_fpn", size=64, min_size=64, max_size=64),
]
TOLERANCE = conformance.TOLERANCE["float32"]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_model_matches_eager_without_fallback(case, caplog):
    caplog.set_level(logging.WARNING, logger="hybrid_trt")
    torch.manual_seed(0)
    model, args = conformance.build(case)
    # A detector's boxes are a weak check on random weights (near-equal scores); its dense outputs (features,
    # per-anchor logits before NMS) are compared too, as recorded during each call.
    taps = conformance.DenseTaps(model) if case.kind == "detector" else None
    before = len(hybrid_trt.reports())
    with torch.no_grad():
        ref = model(*args)
        ref_dense = taps.take() if taps is not None else None
        fast = torch.compile(model, backend="hybrid_trt")
        outs, dense = [], []
        for _ in range(2):  # the first call compiles; the second runs what was built
            outs.append(fast(*args))
            dense.append(taps.take() if taps is not None else None)
    reports = hybrid_trt.reports()[before:]
    if case.kind == "detector":
        assert sum(len(d["scores"]) for d in ref) > 0, "eager gave no detection: the comparison would be vacuous"
        assert set(ref_dense) >= {"backbone"} and len(ref_dense) >= 2, ref_dense.keys()
    for i, out in enumerate(outs):
        result = conformance.compare(out, ref, TOLERANCE)
        assert result["problem"] is None, f"call {i}: {result['problem']}"
        assert result["rel"] <= TOLERANCE, f"call {i}: relative error {result['rel']:.2e} > {TOLERANCE}"
        if taps is not None:
            result = conformance.compare(dense[i], ref_dense, TOLERANCE)
            assert result["problem"] is None, f"call {i}, dense outputs: {result['problem']}"
            assert result["rel"] <= TOLERANCE, f"call {i}, dense outputs: rel error {result['rel']:.2e}"
    events = [e for r in reports for p in r.partitions for e in p.events]
    assert not events, events
    assert all(p.status == "delegated" for r in reports for p in r.partitions)
    assert all(r.inductor_status == "compiled" and r.whole_graph_reason is None for r in reports)
    warnings = [rec.getMessage() for rec in caplog.records if rec.name.startswith("hybrid_trt")]
    assert not warnings, warnings
    delegated = sum(r.delegated_op_count for r in reports)
    assert delegated > 0, "nothing was delegated: this would only test Inductor"
    if "vit" in case.name:  # attention blocks delegate (issue 7)
        delegated_ops = {op for r in reports for p in r.partitions for op in p.ops}
        left = {op.op for r in reports for op in r.inductor_ops}
        assert any("softmax" in op or "attention" in op for op in delegated_ops), delegated_ops
        assert not any("softmax" in op or "bmm" in op or "attention" in op for op in left), left


def test_detection_comparison_accepts_only_swaps_among_ties_at_the_cutoff():
    """The comparison the conformance checks rely on: order-free, a tie at the top-k cut may swap boxes, nothing
    else may differ."""
    boxes = torch.tensor([[0., 0., 10., 10.], [5., 5., 20., 20.], [1., 2., 3., 4.], [7., 7., 9., 9.]])
    ref = [{"boxes": boxes[:3], "scores": torch.tensor([0.9, 0.5, 0.5]), "labels": torch.tensor([1, 2, 2])}]

    def check(b, s, lab):
        return conformance.compare([{"boxes": b, "scores": torch.tensor(s), "labels": torch.tensor(lab)}], ref,
                                   TOLERANCE)["problem"]

    assert check(boxes[[1, 0, 2]], [0.5, 0.9, 0.5], [2, 1, 2]) is None  # reordered
    assert check(boxes[[0, 1, 3]], [0.9, 0.5, 0.5], [1, 2, 2]) is None  # another box of the tied cut-off score
    assert check(boxes[[3, 1, 2]], [0.9, 0.5, 0.5], [1, 2, 2])          # the top box moved
    assert check(boxes[[0, 1, 3]], [0.9, 0.5, 0.5], [1, 2, 3]) is None  # a tie at the cut-off swapped labels too
    assert check(boxes[[0, 1, 2]], [0.9, 0.5, 0.5], [3, 2, 2])          # a label changed above the cut-off
    assert check(boxes[[0, 3, 2]], [0.9, 0.5, 0.5], [1, 3, 2]) is None  # one of two tied at the cut-off swapped
    assert check(boxes[[0, 1, 2]], [0.9, 0.5, 0.49], [1, 2, 2])         # a score changed
    assert check(boxes[:2], [0.9, 0.5], [1, 2])                         # a detection lost
    empty = [{"boxes": torch.zeros(0, 4), "scores": torch.zeros(0), "labels": torch.zeros(0, dtype=torch.long)}]
    assert "no detection" in conformance.compare(empty, empty, TOLERANCE)["problem"]  # vacuous: both empty


def test_detection_without_eager_partner_passes_only_with_an_exclusive_float64_partner():
    """NMS among near-equal scores: which of two overlapping boxes survives is decided by rounding, and eager
    float32 differs from eager float64 there too (SSDlite, random weights). A detection without an eager partner
    passes when it pairs with a detection of eager run in float64 that no other detection claims; the float64
    reference is computed only when a detection needs it."""
    boxes = torch.tensor([[0., 0., 10., 10.], [20., 20., 40., 40.], [50., 50., 70., 70.], [52., 50., 72., 70.],
                          [90., 90., 99., 99.], [100., 0., 110., 10.]])

    def dets(idx, scores, labels):
        return [{"boxes": boxes[idx], "scores": torch.tensor(scores), "labels": torch.tensor(labels)}]
    # Eager float32 kept box 2, float64 the overlapping box 3; box 5's lower score keeps the tie off the cut-off.
    ref = dets([0, 1, 2, 5], [0.9, 0.6, 0.4, 0.1], [1, 2, 2, 3])
    ref64 = dets([0, 1, 3, 5], [0.9, 0.6, 0.4, 0.1], [1, 2, 2, 3])
    calls = []

    def float64_ref():
        calls.append(1)
        return ref64

    def check(idx, scores, labels):
        return conformance.compare(dets(idx, scores, labels), ref, TOLERANCE, float64_ref)

    assert check([1, 0, 2, 5], [0.6, 0.9, 0.4, 0.1], [2, 1, 2, 3])["problem"] is None and not calls  # not run
    result = check([0, 1, 3, 5], [0.9, 0.6, 0.4, 0.1], [1, 2, 2, 3])   # float64's choice
    assert result["problem"] is None and result["paired_float64"] == 1 and calls == [1], result
    assert "in eager float64" in check([0, 1, 4, 5], [0.9, 0.6, 0.4, 0.1], [1, 2, 2, 3])["problem"]  # neither's
    assert check([0, 1, 3, 5], [0.9, 0.6, 0.4, 0.1], [1, 2, 3, 3])["problem"]   # label changed
    assert check([0, 1, 2, 0], [0.9, 0.6, 0.4, 0.9], [1, 2, 2, 1])["problem"]   # a box both keep, duplicated
    # No float64 arbiter: the detection stays unpaired, and the row says why.
    broken = conformance.compare(dets([0, 1, 3, 5], [0.9, 0.6, 0.4, 0.1], [1, 2, 2, 3]), ref, TOLERANCE,
                                 lambda: (_ for _ in ()).throw(RuntimeError("no float64 kernel")))
    assert "no float64 kernel" in broken["problem"], broken


class _TinyDetector(torch.nn.Module):
    """backbone -> head -> a data-dependent selection, returning torchvision's detection format."""

    def __init__(self):
        super().__init__()
        self.backbone = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU())
        self.head = torch.nn.Conv2d(8, 5, 1)

    def forward(self, images):
        out = self.head(self.backbone(images[0][None])).flatten(2)[0].t()  # (anchors, 4 box + 1 score)
        scores = out[:, 4].sigmoid()
        keep = scores.topk(6).indices
        return [{"boxes": out[keep, :4], "scores": scores[keep], "labels": torch.ones_like(keep)}]


def test_worker_times_and_counts_a_hook_free_compile(monkeypatch):
    """The dense-output hooks are for the correctness phase only: the row's latency, graphs and op counts come
    from a compile without them (a hooked compile graph-breaks and recompiles, and that was charged to the
    backend), and the hook-free output is compared with eager too."""
    case = conformance.Case("tiny_detector", "test", "detector",
                            lambda: (_TinyDetector(), ([torch.rand(3, 8, 8)],)), "[3x8x8]")
    monkeypatch.setitem(conformance.CASES_BY_NAME, case.name, case)
    torch._dynamo.reset()
    res = conformance.run_worker(case.name, "cpu", "float32", latency_s=0.05)
    assert "hybrid_error" not in res and "inductor_error" not in res, res
    assert res["hybrid"]["problem"] is None and res["hybrid"]["dense"]["problem"] is None, res["hybrid"]
    assert res["hybrid_unhooked"]["problem"] is None, res["hybrid_unhooked"]
    assert "ops_note" not in res
    # Reference: the same model compiled once, plainly, in this process.
    torch._dynamo.reset()
    before = len(hybrid_trt.reports())
    model, args = conformance.build(case)
    with torch.no_grad():
        fast = torch.compile(model, backend="hybrid_trt")
        for _ in range(3):
            fast(*args)
    plain = hybrid_trt.reports()[before:]
    assert res["graphs"] == len(plain), (res["graphs"], len(plain))
    assert res["total_ops"] == sum(r.total_op_count for r in plain)
    assert set(res["latency_ms"]) == {"eager", "hybrid_trt", "inductor"}
    status, why = conformance.verdict(res)
    assert status in ("ok", "slow"), (status, why)


def test_rows_not_run_say_so():
    row = {"model": "m", "device": "cpu", "dtype": "float32", "input": "-", "fatal": "not run (time budget)",
           "skipped": True}
    assert conformance.verdict(row) == ("not run", "not run (time budget)")
    assert "not run (time budget)" in "\n".join(conformance.table([row]))


class _Float32Grid(torch.nn.Module):
    """RAFT's pattern: a sampling grid built in float32 inside the model, so the model fails in eager in float16."""

    def forward(self, x):
        grid = torch.zeros(x.shape[0], 2, 2, 2)
        return torch.nn.functional.grid_sample(x, grid, align_corners=False)


def test_model_that_fails_in_eager_is_reported_as_such_not_as_a_hybrid_failure(monkeypatch):
    case = conformance.Case("f32_grid", "test", "classifier", lambda: (_Float32Grid(), (torch.rand(1, 1, 4, 4),)),
                            "1x1x4x4")
    monkeypatch.setitem(conformance.CASES_BY_NAME, case.name, case)
    res = conformance.run_worker(case.name, "cpu", "bfloat16", latency_s=0.05)
    assert "hybrid" not in res and "eager_error" in res, res
    status, why = conformance.verdict(res)
    assert status == "eager fails" and "bfloat16" in why and "grid" in why, (status, why)
    assert "eager fails" in "\n".join(conformance.table([res]))


def _dense_row(rel, float64=None):
    row = {"model": "m", "device": "cuda", "dtype": "float32", "input": "-",
           "hybrid": {"abs": rel, "rel": rel, "problem": None}, "inductor": {"abs": 1e-4, "rel": 1e-4, "problem": None}}
    if float64 is not None:
        row["float64"] = float64
    return row


def test_beyond_tolerance_only_an_output_closer_to_float64_than_eager_passes():
    """nf_resnet26 fp32 on the H200: 2.2e-3 from eager, 1.7e-6 from float64, eager's own TF32 error 2.2e-3."""
    assert conformance.verdict(_dense_row(2.2e-3))[0] == "MISMATCH"
    status, why = conformance.verdict(_dense_row(2.2e-3, {"hybrid": 1.7e-6, "eager": 2.2e-3}))
    assert status == "ok" and "closer to float64 than eager" in why, (status, why)
    # Farther from float64 than eager, or beyond tolerance of it: a mismatch still.
    for f64 in ({"hybrid": 5e-4, "eager": 1e-4}, {"hybrid": 3e-3, "eager": 4e-3}):
        status, why = conformance.verdict(_dense_row(2.2e-3, f64))
        assert status == "MISMATCH" and "against float64" in why, (f64, status, why)


def test_worker_measures_both_against_float64_when_beyond_tolerance(monkeypatch):
    """The worker computes the float64 arbiter only for an output beyond tolerance (every output is beyond a
    negative one, even one equal to eager's), and records both distances."""
    case = conformance.Case("f64_tiny", "test", "classifier",
                            lambda: (torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(),
                                                         torch.nn.Conv2d(4, 4, 3)), (torch.rand(1, 3, 12, 12),)),
                            "1x3x12x12")
    monkeypatch.setitem(conformance.CASES_BY_NAME, case.name, case)
    monkeypatch.setitem(conformance.TOLERANCE, "float32", -1.0)
    torch._dynamo.reset()
    res = conformance.run_worker(case.name, "cpu", "float32", latency_s=0.05)
    f64 = res.get("float64")
    assert f64 and 0 <= f64["eager"] < 1e-5 and 0 <= f64["hybrid"] < 1e-5, res


class _FailsInFloat64(torch.nn.Module):
    """Builds its own float32 tensor and mixes it with its weights' dtype in an op that refuses mixed dtypes, as
    RAFT's grid_sample does (its coordinates grid is float32 whatever the model's dtype): fine in float32,
    raises in float64."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)

    def forward(self, x):
        y = self.conv(x)
        grid = torch.zeros(y.shape[0], 2, 2, 2, dtype=torch.float32, device=y.device)
        return torch.nn.functional.grid_sample(y, grid, align_corners=False) + y.mean()


def test_eager_failing_in_float64_is_not_the_compiled_models_failure(monkeypatch):
    """On the H200 the float64 arbiter of RAFT fp32 raised inside eager PyTorch, and the row said hybrid_trt
    FAILED although both its calls had matched. The arbiter's failure is recorded as its own."""
    case = conformance.Case("f64_fails", "test", "classifier",
                            lambda: (_FailsInFloat64(), (torch.rand(1, 3, 12, 12),)), "1x3x12x12")
    monkeypatch.setitem(conformance.CASES_BY_NAME, case.name, case)
    monkeypatch.setitem(conformance.TOLERANCE, "float32", -1.0)  # every output beyond it: the arbiter is asked
    with pytest.raises(RuntimeError):  # the premise: eager itself fails in float64
        m64 = _FailsInFloat64().double()
        m64(torch.rand(1, 3, 12, 12, dtype=torch.float64))
    torch._dynamo.reset()
    res = conformance.run_worker(case.name, "cpu", "float32", latency_s=0.05)
    assert "hybrid_error" not in res and res["hybrid"]["problem"] is None, res
    assert "float64" not in res and "grid" in res["float64_error"], res


def test_slow_row_names_the_placement_verdicts_that_kept_its_partitions():
    """A partition measured and kept on its delegate has no reason of its own; when the row is slow, its verdict
    is the explanation (EVA02-T fp16 on the H200, session 15: delegated whole, 3.6x Inductor, no reason shown)."""
    row = dict(_dense_row(1e-4), delegated_ops=9, total_ops=9, partitions=1, graphs=1, reasons=[],
               latency_ms={"eager": 1.0, "inductor": 1.0, "hybrid_trt": 2.0},
               placements=["graph 0 partition 0: measured: delegate 1.0 ms, Inductor 2.0 ms; kept on the delegate"])
    status, why = conformance.verdict(row)
    assert status == "slow" and "kept by placement: graph 0 partition 0: measured" in why, (status, why)
    del row["placements"]
    assert "kept by placement" not in conformance.verdict(row)[1]


def test_a_slow_row_is_compiled_again_with_measured_placement_and_timed_beside_the_default(monkeypatch):
    """A row slower than both eager and Inductor gets a follow-up in the same process: the model compiled with
    placement="measured", checked against eager and timed in new rounds beside the others; the row says what it
    gave. The follow-up's compile is not counted in the row's graphs and ops."""
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.fc = torch.nn.Conv2d(3, 8, 3), torch.nn.Linear(8, 4)

        def forward(self, x):
            return self.fc(self.conv(x).relu().mean((2, 3)))
    case = conformance.Case("tiny_slow", "test", "classifier", lambda: (Net(), (torch.rand(1, 3, 10, 10),)),
                            "1x3x10x10")
    monkeypatch.setitem(conformance.CASES_BY_NAME, case.name, case)
    monkeypatch.setattr(conformance, "_slower_than_both", lambda lat: True)  # whatever the timing said
    torch._dynamo.reset()
    res = conformance.run_worker(case.name, "cpu", "float32", latency_s=0.05)
    assert "hybrid_error" not in res and res["hybrid"]["problem"] is None, res
    m = res["measured"]
    assert "error" not in m and m["problem"] is None, m
    assert set(m["latency_ms"]) == {"eager", "hybrid_trt", "inductor", "measured"}, m
    assert m["placements"] and all(t.startswith("measured: delegate") for t in m["placements"]), m
    assert m["total_ops"] == res["total_ops"] and res["graphs"] == 1, (m, res)
    status, why = conformance.verdict(res)
    assert status == "slow" and "placement='measured', same process, new rounds" in why, (status, why)
    assert f"{m['delegated_ops']}/{m['total_ops']} ops delegated (measured: delegate" in why, why


def test_a_model_outside_the_suite_is_selected_by_its_library_name():
    """Any timm model or torchvision classifier runs through the suite by name (``timm_<name>``, ``tv_<name>``), at
    timm's fixed input size where the model has one; a name neither library has is refused with where to look."""
    listed = {c.name for c in conformance.CASES}
    assert not listed & {"timm_ghostnet_100", "timm_swinv2_tiny_window8_256", "tv_regnet_x_400mf"}
    ghost, window = conformance.select("timm_ghostnet_100,timm_swinv2_tiny_window8_256")
    assert (ghost.source, ghost.input, window.input) == ("timm", "1x3x64x64", "1x3x256x256")
    regnet, = conformance.select("tv_regnet_x_400mf")
    model, (x,) = regnet.make()
    assert type(model).__name__ == "RegNet" and tuple(x.shape) == (1, 3, 64, 64)
    assert conformance.case_for("tv_regnet_x_400mf").name == "tv_regnet_x_400mf"  # what the worker looks up
    sized, = conformance.select("timm_inception_v4@96")  # its 64x64 is too small for eager itself
    assert (sized.name, sized.input) == ("timm_inception_v4@96", "1x3x96x96")
    assert conformance.case_for("timm_inception_v4@96").input == "1x3x96x96"
    with pytest.raises(SystemExit, match="neither a timm model"):
        conformance.select("timm_no_such_model")
