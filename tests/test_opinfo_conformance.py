"""PyTorch's own OpInfo samples through the delegate (issue 7): every sample that reaches an op with a lowering
either matches eager or is declined by the capability check at compile time; none may fail at lowering, engine
build or first call (that would be a fallback the check should have prevented).

The CI run takes a few samples per OpInfo (the first, then those adding 0-d, zero-size, other ranks and
arguments: ``pick_samples``); ``benchmarks/opinfo_conformance.py --all`` runs every sample and writes the table in
benchmarks/results/. The known defects also go through ``torch.compile`` end to end.
"""
from __future__ import annotations

import collections
import time

import pytest
import torch
import torch.nn.functional as F

import hybrid_trt
from benchmarks import opinfo_conformance as oc

from _helpers import assert_close

# float32 samples per OpInfo in CI (int/bool dtypes get half); about 3 minutes on the 2-core machine.
CI_SAMPLES_PER_OP = 3


@pytest.fixture(scope="module")
def ci_results():
    t0 = time.perf_counter()
    results = []
    for op in oc.select_opinfos():
        results += oc.run_opinfo(op, CI_SAMPLES_PER_OP)
    return results, time.perf_counter() - t0


def test_every_opinfo_sample_matches_or_is_declined_at_compile_time(ci_results):
    results, seconds = ci_results
    failed = [r.line() for r in results if r.status == "failed"]
    assert not failed, f"{len(failed)} OpInfo samples failed through the delegate:\n" + "\n".join(failed)
    print(f"\n{oc.summarise(results).splitlines()[0]} in {seconds:.0f} s")


def test_opinfo_run_covers_the_lowerings(ci_results):
    """The selection is real: hundreds of OpInfos, more samples delegated than declined, and the samples that
    found the issue-7 defects are among those run."""
    results, _ = ci_results
    counts = collections.Counter(r.status for r in results)
    ops = {r.op for r in results}
    assert len(ops) > 300, len(ops)
    assert counts["matched"] > counts["declined"], counts
    for name in ("nn.functional.conv_transpose2d", "permute", "gather", "topk", "index_select"):
        assert name in ops, name
    edge = [r for r in results if r.op in ("permute", "gather") and "[]" in r.description.split(",")[0]
            and r.status == "matched"]
    assert edge, "the 0-d permute/gather samples were not picked or not delegated"
    declined = [d for r in results if r.op == "nn.functional.conv_transpose2d" for d in r.declined]
    assert any("output_padding" in d for d in declined), declined


def test_sample_picking_prefers_edge_cases():
    op = next(o for o in oc.op_db() if oc.opinfo_name(o) == "permute")
    picked = oc.pick_samples(op, torch.float32, 3)
    assert picked[0][0] == 0
    assert any(s.input.dim() == 0 for _, s in picked), [tuple(s.input.shape) for _, s in picked]


def test_a_failing_partition_is_reported_as_failed(monkeypatch):
    """The harness can fail: a check that accepts what ONNX Runtime rejects shows up as a failed sample."""
    from hybrid_trt.lowerings.registry import _LOWERINGS
    import dataclasses
    conv = torch.ops.aten.convolution.default
    monkeypatch.setitem(_LOWERINGS, conv, dataclasses.replace(_LOWERINGS[conv], check=None))
    op = next(o for o in oc.op_db() if oc.opinfo_name(o) == "nn.functional.conv_transpose2d")
    results = [oc.run_sample(op, s, torch.float32, k) for k, s in oc.pick_samples(op, torch.float32, None)
               if "output_padding=(2, 3)" in oc._describe(s)]
    assert results and all(r.status == "failed" and "first call" in r.detail for r in results), \
        [r.line() for r in results]


# -- the known defects, end to end through torch.compile -------------------------------------------------------------
def _compile_and_check(fn, *inputs):
    compiled = torch.compile(fn, backend="hybrid_trt", options={"min_block_size": 1})
    with torch.no_grad():
        expected = fn(*inputs)
        actual = compiled(*inputs)
        again = compiled(*inputs)
    assert_close(actual, expected)
    assert_close(again, expected)
    return hybrid_trt.last_report()


def _no_fallback(report, logs):
    warned = [r.getMessage() for r in logs.records if "falls back" in r.getMessage()]
    assert not warned, warned
    assert all(p.status == "delegated" for p in report.partitions), report.table()


def test_conv_transpose_output_padding_not_below_stride_is_declined_at_compile_time(hybrid_logs):
    """Defect 4: ATen allows output_padding < dilation; ONNX Runtime rejects the node at the first call unless
    output_padding < stride. The check declines it at compile time, with the reason in the report."""
    x, w, b = torch.randn(2, 2, 4, 4), torch.randn(2, 2, 4, 5), torch.randn(4)

    def fn(x, w, b):
        y = F.conv_transpose2d(x, w, b, stride=(3, 2), padding=(1, 2), output_padding=(2, 3), groups=2,
                               dilation=(4, 4))
        return torch.relu(y).sum(dim=1)

    report = _compile_and_check(fn, x, w, b)
    _no_fallback(report, hybrid_logs)
    reasons = [op.reason for op in report.inductor_ops if op.op == "aten.convolution.default"]
    assert reasons and "output_padding" in reasons[0], report.table()


def test_conv_transpose_output_padding_below_stride_still_delegates(hybrid_logs):
    x, w = torch.randn(1, 3, 5, 5), torch.randn(3, 4, 3, 3)
    report = _compile_and_check(lambda x, w: F.conv_transpose2d(x, w, stride=2, output_padding=1), x, w)
    _no_fallback(report, hybrid_logs)
    assert any("aten.convolution.default" in p.ops for p in report.partitions), report.table()


def test_zero_dim_permute_delegates(hybrid_logs):
    """Defect 4: a 0-d permute failed in lowering (empty ``perm``) and fell back at build; it is an Identity."""
    report = _compile_and_check(lambda x: x.permute(()) * 2 + 1, torch.tensor(1.5))
    _no_fallback(report, hybrid_logs)
    assert any("aten.permute.default" in p.ops for p in report.partitions), report.table()


def test_zero_dim_gather_delegates(hybrid_logs):
    """Defect 4: a 0-d gather built but ONNX Runtime's GatherElements rejected it at the first call."""
    x, idx = torch.tensor(2.5), torch.tensor(0)
    report = _compile_and_check(lambda x, i: torch.gather(x, 0, i) * 3, x, idx)
    _no_fallback(report, hybrid_logs)
    assert any("aten.gather.default" in p.ops for p in report.partitions), report.table()
