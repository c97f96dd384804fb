"""Capture: weights become constants of delegated partitions (not engine inputs), except buffers the graph
itself writes; input mutations keep their eager semantics."""
import torch
import torch.nn as nn

import hybrid_trt

from _helpers import assert_close


class Counter(nn.Module):
    """A buffer updated in forward: its value differs on every call, so it must not be baked into an engine."""

    def __init__(self):
        super().__init__()
        self.register_buffer("count", torch.zeros(1))
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        self.count += 1
        return torch.relu(self.lin(x)) * self.count + 1


def test_weights_are_constants_of_the_partition():
    torch.manual_seed(0)
    model, x = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 2)).eval(), torch.randn(3, 6)
    with torch.no_grad():
        out = torch.compile(model, backend="hybrid_trt")(x)
        assert_close(out, model(x))
    report = hybrid_trt.last_report()
    assert len(report.partitions) == 1
    assert report.partitions[0].input_shapes == [[3, 6]], "weights must be initializers, not engine inputs"


def test_buffer_mutated_in_forward_is_not_baked_in():
    torch.manual_seed(0)
    eager, hybrid = Counter().eval(), Counter().eval()
    hybrid.load_state_dict(eager.state_dict())
    compiled = torch.compile(hybrid, backend="hybrid_trt", options={"min_block_size": 1})
    x = torch.randn(2, 4)
    with torch.no_grad():
        for call in range(3):
            assert_close(compiled(x), eager(x), what=f"call {call}")
            assert hybrid.count.item() == eager.count.item() == call + 1
    report = hybrid_trt.last_report()
    assert report.partitions and report.partitions[0].status == "delegated"
    assert [1] in report.partitions[0].input_shapes, "the mutated buffer is read as an input, each call"


def test_input_mutation_keeps_eager_semantics():
    def f(x, y):
        x.mul_(2)
        # softmax: a block of pointwise ops alone would go back to Inductor, and this test needs a delegated one.
        return torch.softmax(torch.relu(x) + torch.sigmoid(y), dim=0)

    x, y = torch.randn(5), torch.randn(5)
    x_hybrid = x.clone()
    compiled = torch.compile(f, backend="hybrid_trt", options={"min_block_size": 1})
    with torch.no_grad():
        expected = f(x, y)
        out = compiled(x_hybrid, y)
    assert_close(out, expected)
    assert_close(x_hybrid, x, what="mutated input")
    assert hybrid_trt.last_report().delegated_op_count >= 2
