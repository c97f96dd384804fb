"""Unit tests of partition_graph on small fx graphs (no compilation): cycle freedom, delegate priority,
min_block_size, forced ops, and that the stitched graph of any plan is a valid DAG. The merge tests use pointwise
ops and so keep pointwise islands (keep_pointwise_islands=True); the rule that hands them back is tested alone."""
from __future__ import annotations

import random

import pytest
import torch
import torch.fx as fx
from torch.fx.experimental.proxy_tensor import make_fx

from hybrid_trt.delegates import get_delegate
from hybrid_trt.delegates.registry import Delegate
from hybrid_trt.partitioner import NodeKind, classify, partition_graph
from hybrid_trt.partitioner.capability import unsupported_reason
from hybrid_trt.partitioner.extract import extract
from hybrid_trt.stitch.stitcher import stitch

aten = torch.ops.aten
ORT = get_delegate("onnxruntime")


class FakeDelegate(Delegate):
    """A delegate that takes the standard ONNX domain in the given dtypes; never built here."""

    def __init__(self, name, dtypes):
        self.name = name
        self.dtypes = frozenset(dtypes)

    def unavailable_reason(self):
        return None

    def build(self, model, output_metas, device, options):
        raise AssertionError("not built in partitioner tests")


def trace(fn, *inputs) -> fx.GraphModule:
    return make_fx(fn, tracing_mode="fake")(*inputs)


def op_nodes(gm):
    return [n for n in gm.graph.nodes if classify(n) is NodeKind.OP]


def by_target(gm, target):
    return [n for n in gm.graph.nodes if n.target is target]


def owner_map(plan):
    owner = {}
    for k, p in enumerate(plan.partitions):
        for n in p.nodes:
            assert n not in owner, f"{n} is in two partitions"
            owner[n] = k
    return owner


def assert_plan_valid(gm, plan, delegates):
    """Every OP node is in exactly one partition or has a reason; partition members are supported by their
    delegate; the graph condensed to units is acyclic; and stitch() accepts it and produces a linted graph."""
    owner = owner_map(plan)
    names = {d.name: d for d in delegates}
    for n in op_nodes(gm):
        assert (n in owner) != (n in plan.inductor_reasons), f"{n}: owner={n in owner} reason={n in plan.inductor_reasons}"
    for p in plan.partitions:
        for n in p.nodes:
            if classify(n) is NodeKind.OP:
                assert unsupported_reason(n, names[p.delegate], frozenset()) is None, n
    # Acyclicity of the condensed graph: Kahn's algorithm over units.
    unit = {n: ("p", owner[n]) if n in owner else n for n in gm.graph.nodes}
    deps = {u: set() for u in unit.values()}
    for n in gm.graph.nodes:
        for i in n.all_input_nodes:
            if unit[i] != unit[n]:
                deps[unit[n]].add(unit[i])
    remaining = dict(deps)
    while remaining:
        ready = [u for u, d in remaining.items() if not (d & remaining.keys())]
        assert ready, f"partitions form a cycle: {[u for u in remaining]}"
        for u in ready:
            del remaining[u]

    class Part:
        def __init__(self, p, key):
            self.nodes, self.extracted, self.key = p.nodes, extract(p, {}), key

    stitched = stitch(gm, [Part(p, f"key{k}") for k, p in enumerate(plan.partitions)])
    stitched.graph.lint()
    calls = [n for n in stitched.graph.nodes if n.target is torch.ops.hybrid_trt.delegate.default]
    assert len(calls) == len(plan.partitions)
    return owner


def test_diamond_does_not_merge_around_an_unsupported_node():
    # A (supported) -> U (unsupported) -> B (supported), and A -> B directly.
    def f(x):
        a = torch.relu(x)
        u = torch.atan2(a, x)
        return torch.mul(a, u)

    gm = trace(f, torch.randn(4, 4))
    plan = partition_graph(gm.graph, [ORT], min_block_size=1, keep_pointwise_islands=True)
    owner = assert_plan_valid(gm, plan, [ORT])
    a, = by_target(gm, aten.relu.default)
    u, = by_target(gm, aten.atan2.default)
    b, = by_target(gm, aten.mul.Tensor)
    assert u not in owner and "no lowering" in plan.inductor_reasons[u]
    assert a in owner and b in owner and owner[a] != owner[b]


def test_independent_blocks_merge_and_dependent_ones_do_not():
    def f(x, y):
        a = torch.relu(x)  # block 1
        b = torch.sigmoid(y)  # independent of block 1: may join it
        u = torch.atan2(a, b)  # unsupported, depends on both
        c = torch.exp(u)  # depends on u: cannot join the block holding a and b
        return c, b

    gm = trace(f, torch.randn(3), torch.randn(3))
    plan = partition_graph(gm.graph, [ORT], min_block_size=1, keep_pointwise_islands=True)
    owner = assert_plan_valid(gm, plan, [ORT])
    a, = by_target(gm, aten.relu.default)
    b, = by_target(gm, aten.sigmoid.default)
    c, = by_target(gm, aten.exp.default)
    assert owner[a] == owner[b] != owner[c]
    assert len(plan.partitions) == 2


@pytest.mark.parametrize("seed", range(60))
def test_random_dags_partition_without_cycles(seed):
    rng = random.Random(seed)
    supported = [torch.relu, torch.sigmoid, torch.tanh, torch.neg, torch.exp]
    unsupported = [torch.erfinv, torch.sinh, lambda t: torch.cumprod(t, 0)]
    n_ops = rng.randint(4, 14)
    plan_ops = []
    for i in range(n_ops):
        kind = rng.random()
        if kind < 0.3:
            plan_ops.append(("u", rng.randrange(len(unsupported)), rng.randrange(i + 1), None))
        elif kind < 0.6:
            plan_ops.append(("b", None, rng.randrange(i + 1), rng.randrange(i + 1)))
        else:
            plan_ops.append(("s", rng.randrange(len(supported)), rng.randrange(i + 1), None))

    def f(x):
        vals = [x]
        for kind, which, i, j in plan_ops:
            if kind == "u":
                vals.append(unsupported[which](torch.tanh(vals[i]) * 0.5) if which == 0 else unsupported[which](vals[i]))
            elif kind == "b":
                vals.append(torch.add(vals[i], vals[j]))
            else:
                vals.append(supported[which](vals[i]))
        return tuple(vals[1:])

    gm = trace(f, torch.randn(5))
    for min_block in (1, 2, 3):
        plan = partition_graph(gm.graph, [ORT], min_block_size=min_block, keep_pointwise_islands=True)
        assert_plan_valid(gm, plan, [ORT])
        for p in plan.partitions:
            assert p.op_count >= min_block


def test_min_block_size():
    def f(x):
        a = torch.sigmoid(torch.relu(x))  # 2 supported ops
        u = torch.erfinv(torch.clamp(a, -0.5, 0.5).mul(0) + 0.25)  # clamp, mul, add supported; erfinv not
        return torch.exp(torch.neg(torch.tanh(torch.abs(u))))  # 4 supported ops

    gm = trace(f, torch.randn(4))
    plan1 = partition_graph(gm.graph, [ORT], min_block_size=1, keep_pointwise_islands=True)
    assert_plan_valid(gm, plan1, [ORT])
    assert sum(p.op_count for p in plan1.partitions) == len(op_nodes(gm)) - 1

    plan = partition_graph(gm.graph, [ORT], min_block_size=5, keep_pointwise_islands=True)
    assert_plan_valid(gm, plan, [ORT])
    assert len(plan.partitions) == 1 and plan.partitions[0].op_count == 5  # relu,sigmoid,clamp,mul,add
    for n in (by_target(gm, aten.exp.default) + by_target(gm, aten.tanh.default)):
        assert "block of 4 op(s) < min_block_size=5" in plan.inductor_reasons[n]

    plan = partition_graph(gm.graph, [ORT], min_block_size=6, keep_pointwise_islands=True)
    assert plan.partitions == []
    assert all("min_block_size=6" in why for n, why in plan.inductor_reasons.items()
               if n.target is not aten.erfinv.default)


def test_delegate_priority_order():
    def f(x, i):
        y = torch.relu(torch.sigmoid(x) * 2.0)  # float32
        j = torch.abs(i) + 1  # int64
        return y, j

    gm = trace(f, torch.randn(4), torch.arange(4))
    floats = FakeDelegate("floats", {torch.float32, torch.int64})
    ints = FakeDelegate("ints", {torch.int64})
    plan = partition_graph(gm.graph, [floats, ints], min_block_size=1, keep_pointwise_islands=True)
    assert_plan_valid(gm, plan, [floats, ints])
    assert {p.delegate for p in plan.partitions} == {"floats"}  # the first delegate claims all it can

    plan = partition_graph(gm.graph, [ints, floats], min_block_size=1, keep_pointwise_islands=True)
    owner = assert_plan_valid(gm, plan, [ints, floats])
    delegate_of = {n: plan.partitions[k].delegate for n, k in owner.items()}
    assert delegate_of[by_target(gm, aten.abs.default)[0]] == "ints"
    assert delegate_of[by_target(gm, aten.sigmoid.default)[0]] == "floats"
    assert delegate_of[by_target(gm, aten.relu.default)[0]] == "floats"


def test_inductor_reasons_collect_every_delegate():
    def f(x):
        return torch.relu(x.to(torch.float16)) + 1

    gm = trace(f, torch.randn(4))
    d1 = FakeDelegate("d1", {torch.float32})
    d2 = FakeDelegate("d2", {torch.float64})
    plan = partition_graph(gm.graph, [d1, d2], min_block_size=1, keep_pointwise_islands=True)
    relu, = by_target(gm, aten.relu.default)
    why = plan.inductor_reasons[relu]
    assert "d1: dtype float16 not supported" in why and "d2: dtype float16 not supported" in why


def test_forced_ops_stay_with_inductor():
    def f(x):
        return torch.sigmoid(torch.relu(x) + 1)

    gm = trace(f, torch.randn(4))
    for spelling in ("aten.relu", "aten.relu.default", "relu"):
        plan = partition_graph(gm.graph, [ORT], 1, frozenset({spelling}), keep_pointwise_islands=True)
        assert_plan_valid(gm, plan, [ORT])
        relu, = by_target(gm, aten.relu.default)
        assert "force_inductor_ops" in plan.inductor_reasons[relu], spelling
        assert sum(p.op_count for p in plan.partitions) == 2


def test_multi_output_op_keeps_its_getitems():
    def f(x):
        v, i = torch.max(torch.relu(x), dim=1)
        return v * 2, i + 1

    gm = trace(f, torch.randn(3, 4))
    plan = partition_graph(gm.graph, [ORT], min_block_size=1, keep_pointwise_islands=True)
    owner = assert_plan_valid(gm, plan, [ORT])
    mx, = by_target(gm, aten.max.dim)
    for user in mx.users:
        assert owner[user] == owner[mx]


def test_partitioning_a_large_graph_is_fast():
    """2000 ops with an unsupported op every 7th: ~290 blocks. Fusing independent blocks used a graph search
    per pair of blocks (about 45 s here); it must stay well under a second or two."""
    import time

    rng = random.Random(0)
    choices = [rng.randrange(8) for _ in range(2000)]

    def f(x, y):
        vals = [x, y]
        for i, back in enumerate(choices):
            a, b = vals[-1], vals[max(0, len(vals) - 1 - back)]
            vals.append(torch.atan2(a, b) if i % 7 == 3 else torch.add(a, b) if i % 2 else torch.relu(a))
        return vals[-1], vals[len(vals) // 2]

    gm = trace(f, torch.randn(4), torch.randn(4))
    t0 = time.perf_counter()
    plan = partition_graph(gm.graph, [ORT], min_block_size=1, keep_pointwise_islands=True)
    elapsed = time.perf_counter() - t0
    assert len(plan.partitions) > 200
    assert elapsed < 3.0, f"partitioning 2000 ops took {elapsed:.1f} s"
    assert_plan_valid(gm, plan, [ORT])


def test_constants_used_outside_a_partition_stay_with_inductor():
    w = torch.randn(4)

    def f(x):
        zeros = torch.zeros(4, 4)  # a factory only Inductor consumes
        scale = w * 2.0 + 1.0  # weight arithmetic used in the partition and by Inductor
        inner = w * 3.0  # weight arithmetic used only inside the partition
        a = torch.sigmoid(torch.relu(x) * scale + inner)
        return torch.atan2(a, zeros), torch.atan2(scale, scale)

    gm = make_fx(f, tracing_mode="fake", _allow_non_fake_inputs=True)(torch.randn(4, 4))  # w: a get_attr
    plan = partition_graph(gm.graph, [ORT], min_block_size=1, keep_pointwise_islands=True)
    owner = assert_plan_valid(gm, plan, [ORT])
    zeros, = by_target(gm, aten.zeros.default)
    muls = by_target(gm, aten.mul.Tensor)
    adds = by_target(gm, aten.add.Tensor)
    scale_mul, inner_mul, data_mul = muls
    scale_add, data_add = adds
    for n in (zeros, scale_mul, scale_add):
        assert n not in owner and "constant consumed outside the partition" in plan.inductor_reasons[n], n
    assert owner[inner_mul] == owner[data_mul] == owner[data_add]
    part = plan.partitions[owner[data_mul]]
    assert scale_add in part.inputs and not any(o.op == "get_attr" for o in part.outputs)
    assert all(o not in (zeros, scale_mul, scale_add, inner_mul) for o in part.outputs)


def test_pointwise_islands_go_back_to_inductor_unless_they_are_the_whole_graph():
    def island(x):
        a = torch.atan2(x, x)  # Inductor
        b = torch.relu(a * 2.0 + 1.0)  # pointwise island between Inductor ops
        c = torch.atan2(b, b)
        return torch.mm(c, c).relu()  # a real op: this block stays delegated

    gm = trace(island, torch.randn(4, 4))
    plan = partition_graph(gm.graph, [ORT], min_block_size=1)
    owner = assert_plan_valid(gm, plan, [ORT])
    relu_island = by_target(gm, aten.relu.default)[0]
    mm, = by_target(gm, aten.mm.default)
    assert relu_island not in owner and "only pointwise, view" in plan.inductor_reasons[relu_island]
    assert mm in owner and len(plan.partitions) == 1

    def conv_bn_pool_conv(x, w, mean, var):
        # float64: ONNX Runtime's CPU provider has no float64 convolution, so the batch norm, ReLU and max pool
        # between the two convolutions would be a 3-op island with a seam on each side
        y = torch.nn.functional.conv2d(x, w, padding=1)
        y = aten._native_batch_norm_legit_no_training(y, w[:, 0, 0, 0], mean, mean, var, 0.1, 1e-5)[0]  # eval BN
        y = torch.nn.functional.max_pool2d(torch.relu(y), 3, 2, 1)
        return torch.nn.functional.conv2d(torch.nn.functional.avg_pool2d(y, 2), w, padding=1)

    d = dict(dtype=torch.float64)
    gm = trace(conv_bn_pool_conv, torch.randn(1, 4, 8, 8, **d), torch.randn(4, 4, 3, 3, **d), torch.randn(4, **d),
               torch.rand(4, **d) + 0.5)
    gm.graph.eliminate_dead_code()  # the unused statistics and indices, as in a captured graph
    plan = partition_graph(gm.graph, [ORT], min_block_size=1)
    assert not plan.partitions, plan.partitions
    for op in (aten._native_batch_norm_legit_no_training.default, aten.relu.default,
               aten.max_pool2d_with_indices.default):
        n, = by_target(gm, op)
        assert "only pointwise, view, batch-norm or pooling ops" in plan.inductor_reasons[n], op
    plan = partition_graph(gm.graph, [ORT], min_block_size=1, keep_pointwise_islands=True)
    delegated = {n for p in plan.partitions for n in p.nodes}
    for op in (aten._native_batch_norm_legit_no_training.default, aten.relu.default,
               aten.max_pool2d_with_indices.default):  # without the rule, the island is delegated
        n, = by_target(gm, op)
        assert n in delegated and n not in plan.inductor_reasons, op

    def all_pointwise(x):
        return torch.sigmoid(torch.relu(x) * 3.0)

    gm = trace(all_pointwise, torch.randn(4, 4))
    plan = partition_graph(gm.graph, [ORT], min_block_size=1)
    assert len(plan.partitions) == 1 and not plan.inductor_reasons


def test_onnxruntime_declines_float16_on_cpu_with_its_reason():
    def f(x):
        h = x.to(torch.float16)
        return torch.mm(h.float(), x).to(torch.float16).relu()

    gm = trace(f, torch.randn(4, 4))
    plan = partition_graph(gm.graph, [ORT], min_block_size=1)
    assert_plan_valid(gm, plan, [ORT])
    relu, = by_target(gm, aten.relu.default)
    assert "dtype float16 not supported on the CPU provider" in plan.inductor_reasons[relu]


def _fake_graph(fn, *specs):
    """``fn`` traced on fake tensors of the given (shape, device) specs: CUDA metadata without a GPU."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode(allow_non_fake_inputs=True):
        inputs = [torch.empty(shape, device=device) for shape, device in specs]
        return make_fx(fn, tracing_mode="real")(*inputs)


class _BothDevices(FakeDelegate):
    device_types = frozenset({"cpu", "cuda"})


BOTH = _BothDevices("both", [torch.float32])


def test_a_cuda_op_reading_a_cpu_scalar_tensor_stays_with_inductor():
    """ATen lets a CUDA op read a 0-d CPU tensor (torchvision detectors' image sizes); an engine would bind that
    host pointer as device memory (an illegal memory access on the H200)."""
    gm = _fake_graph(lambda x, s: ((x * s).relu() + 1).sigmoid(), ((2, 3), "cuda"), ((), "cpu"))
    [mul] = by_target(gm, aten.mul.Tensor)
    reason = unsupported_reason(mul, BOTH, frozenset())
    assert reason is not None and "mixes devices" in reason, reason
    plan = partition_graph(gm.graph, [BOTH], min_block_size=1, forced_to_inductor=frozenset(),
                           keep_pointwise_islands=True)
    assert mul not in {n for p in plan.partitions for n in p.nodes}
    assert "mixes devices" in plan.inductor_reasons[mul]


def test_partitions_never_mix_devices():
    """A graph computing partly on the CPU and partly on CUDA: each partition is on one device, however the
    blocks could otherwise merge."""
    def f(x, y):
        return (x.relu() + 1).sigmoid(), (y.relu() * 2).tanh()
    gm = _fake_graph(f, ((4, 4), "cuda"), ((4, 4), "cpu"))
    plan = partition_graph(gm.graph, [BOTH], min_block_size=1, forced_to_inductor=frozenset(),
                           keep_pointwise_islands=True)
    assert len(plan.partitions) == 2
    for p in plan.partitions:
        devices = {n.meta["val"].device.type for n in p.nodes if isinstance(n.meta.get("val"), torch.Tensor)}
        assert len(devices) == 1, devices
