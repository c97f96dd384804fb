"""Differential tests against eager for the example models (small configs), with report checks."""
import pytest
import torch

import hybrid_trt
from examples.models import build

from _helpers import assert_close


def _compile_and_run(name, **options):
    model, x = build(name, small=True)
    with torch.no_grad():
        expected = model(x)
        compiled = torch.compile(model, backend="hybrid_trt", options=options or None)
        out = compiled(x)
        again = compiled(x)  # the second call runs the built engines (no first-call guard)
    return expected, out, again, hybrid_trt.last_report()


@pytest.mark.parametrize("name", ["resnet18", "transformer"])
def test_fully_delegated_models(name, capsys):
    expected, out, again, report = _compile_and_run(name, print_report=True)
    assert_close(out, expected, rtol=1e-4, atol=1e-4)
    assert_close(again, expected, rtol=1e-4, atol=1e-4)

    assert report.whole_graph_reason is None and report.inductor_status == "compiled"
    assert len(report.partitions) == 1, report.table()
    part = report.partitions[0]
    assert part.delegate == "onnxruntime" and part.status == "delegated" and not part.events
    assert report.inductor_ops == [], report.table()
    assert report.delegated_op_count == part.op_count == sum(part.ops.values()) > 10
    assert len(part.engines) == 1 and part.build_seconds > 0
    if name == "resnet18":
        assert part.ops["aten.convolution.default"] == 20
        assert part.ops["aten._native_batch_norm_legit_no_training.default"] == 20
        assert part.input_shapes == [[1, 3, 32, 32]] and part.output_shapes == [[1, 10]]
    else:
        assert part.ops["aten.native_layer_norm.default"] == 2 and part.ops["aten._softmax.default"] == 1
        assert part.input_shapes == [[2, 16, 32]] and part.output_shapes == [[2, 16, 32]]
    # print_report prints the table; the data form round-trips through to_dict.
    printed = capsys.readouterr().out
    assert f"{part.op_count}/{part.op_count} ops delegated in 1 partition(s)" in printed
    assert report.to_dict()["partitions"][0]["op_count"] == part.op_count


def test_detector_splits_around_atan2():
    expected, out, again, report = _compile_and_run("detector")
    boxes, scores, cls = out
    assert_close(out, expected, rtol=1e-4, atol=1e-4)
    assert_close(again, expected, rtol=1e-4, atol=1e-4)

    assert report.whole_graph_reason is None
    assert report.partitions and all(p.status == "delegated" and p.delegate == "onnxruntime"
                                     for p in report.partitions)
    left = {op.op: op.reason for op in report.inductor_ops}
    assert "aten.atan2.default" in left, report.table()
    assert "no lowering" in left["aten.atan2.default"]
    # The bulk of the model (convolutions, heads, top-k decode) is delegated; only the tail stays in Inductor.
    delegated_ops = {}
    for p in report.partitions:
        for op, n in p.ops.items():
            delegated_ops[op] = delegated_ops.get(op, 0) + n
    assert delegated_ops["aten.convolution.default"] >= 8
    assert delegated_ops["aten.topk.default"] == 1
    assert report.delegated_op_count > 5 * len(report.inductor_ops)
    table = report.table()
    assert "aten.atan2.default" in table and "no lowering" in table
    assert str(report) == table
    assert hybrid_trt.reports()[-1] is report


class _WithGraphBreak(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(8, 8)
        self.b = torch.nn.Linear(8, 3)

    def forward(self, x):
        y = torch.relu(self.a(x)) * 2
        torch._dynamo.graph_break()
        return torch.atan2(self.b(y), y[:, :3]).sigmoid()


def test_one_report_per_graph_with_graph_breaks():
    torch.manual_seed(0)
    model, x = _WithGraphBreak().eval(), torch.randn(4, 8)
    before = len(hybrid_trt.reports())
    with torch.no_grad():
        expected = model(x)
        out = torch.compile(model, backend="hybrid_trt", options={"min_block_size": 1})(x)
    assert_close(out, expected)
    new = hybrid_trt.reports()[before:]
    assert len(new) == 2, [r.table() for r in new]
    assert [r.graph_index for r in new] == [before, before + 1]
    first, second = new
    assert first.partitions and first.inductor_ops == []  # linear, relu, mul: all delegated
    assert "aten.atan2.default" in {op.op for op in second.inductor_ops}
    assert second.partitions, second.table()
