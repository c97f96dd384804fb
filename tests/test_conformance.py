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
    taps = conformance.tap_dense(model) if case.kind == "detector" else None
    before = len(hybrid_trt.reports())
    with torch.no_grad():
        ref = model(*args)
        ref_dense = conformance.take_dense(taps) if taps is not None else None
        fast = torch.compile(model, backend="hybrid_trt")
        outs, dense = [], []
        for _ in range(2):  # the first call compiles; the second runs what was built
            outs.append(fast(*args))
            dense.append(conformance.take_dense(taps) if taps is not None else None)
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
    assert check(boxes[[0, 1, 3]], [0.9, 0.5, 0.5], [1, 2, 3])          # a label changed
    assert check(boxes[[0, 1, 2]], [0.9, 0.5, 0.49], [1, 2, 2])         # a score changed
    assert check(boxes[:2], [0.9, 0.5], [1, 2])                         # a detection lost
    empty = [{"boxes": torch.zeros(0, 4), "scores": torch.zeros(0), "labels": torch.zeros(0, dtype=torch.long)}]
    assert "no detection" in conformance.compare(empty, empty, TOLERANCE)["problem"]  # vacuous: both empty
