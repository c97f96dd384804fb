"""Ordering between ONNX Runtime partitions and Inductor kernels on CUDA (issue 7, defect 2).

A delegated partition computes on its session's own stream; each call must start after the caller's stream has
produced the inputs and must finish before the caller's stream reads the outputs, on any caller stream. The
models here make a race visible: a slow delegated partition (a big matmul or conv chain) feeds ops left to
Inductor, the input changes every iteration (a stale output differs from the right one), and all arithmetic is
on small integers, so the hybrid result must equal eager bit for bit. A test with the stream waits removed checks
that these tests do see a missing ordering.

Needs a GPU and onnxruntime-gpu (skipped otherwise):

    .venv/bin/python -m pytest -q tests/test_cuda_ordering.py
"""
import pytest
import torch
import torch.nn as nn

import hybrid_trt

ort = pytest.importorskip("onnxruntime")
pytestmark = pytest.mark.skipif(
    not (torch.cuda.is_available() and "CUDAExecutionProvider" in ort.get_available_providers()),
    reason="needs CUDA and onnxruntime-gpu's CUDAExecutionProvider")

ITERATIONS = 40


@pytest.fixture(autouse=True)
def _exact_fp32():
    """No TF32 anywhere (the delegates follow PyTorch's TF32 switches at build: delegates/tf32.py), so integer
    arithmetic is exact even through Winograd/FFT convolutions."""
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    torch._dynamo.reset()
    yield
    torch.cuda.synchronize()
    torch._dynamo.reset()
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved


def _ternary(*shape, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(-1, 2, shape, generator=g).float()


class MatmulChain(nn.Module):
    """~1 TFLOP of delegated matmuls; |values| <= 8 after each clamp, so every sum is an exact float32 integer.
    The row reductions are forced to Inductor, so they read the partition's output right after the call."""

    def __init__(self, n=4096, depth=8):
        super().__init__()
        self.w = nn.Parameter(_ternary(n, n, seed=0), requires_grad=False)
        self.depth = depth

    def forward(self, x):
        for _ in range(self.depth):
            x = torch.clamp(x @ self.w, -8, 8)
        return x.sum(1), x.amax(1)


_CHAIN_OPTIONS = {"delegates": ["onnxruntime"], "force_inductor_ops": ["aten.sum.dim_IntList", "aten.amax.default"]}


def _chain_input(n, g):
    """Made by a slow kernel (an exact product with the identity, milliseconds of work) on the caller's stream
    just before the call, so a partition that starts before the caller's stream is done reads it half-made."""
    x = torch.randint(-8, 9, (n, n), device="cuda", generator=g).float()
    return x @ torch.eye(n, device="cuda")


def _run_chain(fast, model, n):
    """Hybrid and eager outputs per iteration, compared after the loop (no host sync inside it). Each input is
    made on the current stream just before the call, so a partition that starts too early reads it half-made."""
    g = torch.Generator(device="cuda").manual_seed(1)
    got, want = [], []
    for _ in range(ITERATIONS):
        x = _chain_input(n, g)
        got.append(fast(x))
        want.append(model(x))
    torch.cuda.synchronize()
    return [all(torch.equal(a, b) for a, b in zip(g, w)) for g, w in zip(got, want)]


def _delegated_ops(report) -> dict:
    ops = {}
    for p in report.partitions:
        if p.status == "delegated":
            for name, count in p.ops.items():
                ops[name] = ops.get(name, 0) + count
    return ops


@pytest.mark.parametrize("build_on,run_on", [("default", "default"), ("default", "side"), ("side", "default"),
                                             ("side", "side")])
def test_slow_partition_feeding_inductor_matches_eager_exactly(build_on, run_on):
    """Compiled (and engines built) on one stream, called on another: the session's stream is its own, the
    ordering follows whichever stream is current at each call."""
    model = MatmulChain().cuda().eval()
    n = model.w.shape[0]
    side = torch.cuda.Stream()
    with torch.no_grad():
        fast = torch.compile(model, backend="hybrid_trt", options=_CHAIN_OPTIONS)
        with torch.cuda.stream(side if build_on == "side" else torch.cuda.default_stream()):
            fast(_chain_input(n, torch.Generator(device="cuda").manual_seed(7)))
        torch.cuda.synchronize()
        assert any("mm" in name for name in _delegated_ops(hybrid_trt.last_report())), hybrid_trt.last_report()
        with torch.cuda.stream(side if run_on == "side" else torch.cuda.default_stream()):
            matches = _run_chain(fast, model, n)
    assert all(matches), f"{matches.count(False)} of {ITERATIONS} iterations differ from eager"


@pytest.mark.parametrize("run_on", ["default", "side"])
def test_fully_delegated_graph_called_directly_orders_on_the_callers_stream(run_on):
    """The whole chain delegated: the frame calls the runtime directly (stitch/direct.py), with no Inductor code
    around it. Each input is made on the caller's stream just before the call and each output is read (cloned)
    on it right after, so a call that starts early or returns before its outputs are ready differs from eager."""
    model = MatmulChain().cuda().eval()
    n = model.w.shape[0]
    side = torch.cuda.Stream()
    with torch.no_grad():
        fast = torch.compile(model, backend="hybrid_trt", options={"delegates": ["onnxruntime"]})
        fast(_chain_input(n, torch.Generator(device="cuda").manual_seed(7)))
        torch.cuda.synchronize()
        assert hybrid_trt.last_report().per_call == "direct", hybrid_trt.last_report().table()
        with torch.cuda.stream(side if run_on == "side" else torch.cuda.default_stream()):
            cloning = lambda x: tuple(t.clone() for t in fast(x))  # noqa: E731
            matches = _run_chain(cloning, model, n)
    assert all(matches), f"{matches.count(False)} of {ITERATIONS} iterations differ from eager"


@torch.library.custom_op("hybrid_trt_test::decode", mutates_args=())
def decode(table: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """A user's decode op: gathers rows by the indices a delegated topk produced (out-of-range indices trip a
    device-side assert, as in the issue)."""
    return table.index_select(0, idx.flatten()) * 2


@decode.register_fake
def _(table, idx):
    return table.new_empty((idx.numel(), table.shape[1]))


class TopkDetector(nn.Module):
    """Conv backbone -> score map -> topk, all delegated; the indices feed a custom op left to Inductor. Conv sums
    of small integers are rounded (exact up to FFT/Winograd error) and a distinct tie-break per pixel makes topk
    unique, so indices and values equal eager's."""

    def __init__(self, width=64, depth=8, size=192, k=100):
        super().__init__()
        layers, cin = [], 3
        for i in range(depth):
            conv = nn.Conv2d(cin, width, 3, padding=1, bias=False)
            conv.weight.data = _ternary(*conv.weight.shape, seed=10 + i)
            layers.append(conv)
            cin = width
        self.convs = nn.ModuleList(layers)
        self.head = nn.Conv2d(width, 1, 1, bias=False)
        self.head.weight.data = _ternary(*self.head.weight.shape, seed=99)
        self.register_buffer("tiebreak", torch.randperm(size * size, generator=torch.Generator().manual_seed(5))
                             .float())
        self.k = k

    def forward(self, image, table):
        x = image
        for conv in self.convs:
            x = torch.clamp(torch.round(conv(x)), -2, 2)
        score = torch.clamp(torch.round(self.head(x)), -8, 8).flatten() * 65536 + self.tiebreak  # exact, distinct
        values, idx = torch.topk(score, self.k)
        return values, idx, torch.ops.hybrid_trt_test.decode(table, idx)


@pytest.mark.parametrize("run_on", ["default", "side"])
def test_topk_indices_feeding_a_custom_gather_match_eager(run_on):
    size = 192
    model = TopkDetector(size=size).cuda().eval()
    g = torch.Generator(device="cuda").manual_seed(3)
    frames = [(torch.randint(-2, 3, (1, 3, size, size), device="cuda", generator=g).float(),
               torch.randn(size * size, 4, device="cuda", generator=g)) for _ in range(ITERATIONS)]
    side = torch.cuda.Stream()
    with torch.no_grad():
        fast = torch.compile(model, backend="hybrid_trt", options={"delegates": ["onnxruntime"]})
        fast(*frames[0])
        assert "aten.topk.default" in _delegated_ops(hybrid_trt.last_report()), hybrid_trt.last_report()
        got, want = [], []
        with torch.cuda.stream(side if run_on == "side" else torch.cuda.default_stream()):
            for image, table in frames:
                got.append(fast(image, table))
                want.append(model(image, table))
        torch.cuda.synchronize()
    bad = [i for i, (a, b) in enumerate(zip(got, want)) if not all(torch.equal(x, y) for x, y in zip(a, b))]
    assert not bad, f"iterations {bad} differ from eager"


def test_the_check_sees_a_missing_ordering(monkeypatch):
    """With the stream waits removed, the same check fails: the session's stream starts on an input the caller's
    stream is still computing (uncaptured runs end with a host sync on the session's stream, so the output side
    is ordered by ONNX Runtime itself then). (Run last: the race leaves nothing behind but wrong float values.)"""
    model = MatmulChain().cuda().eval()
    n = model.w.shape[0]
    with torch.no_grad():
        fast = torch.compile(model, backend="hybrid_trt", options=_CHAIN_OPTIONS)
        fast(_chain_input(n, torch.Generator(device="cuda").manual_seed(7)))
        torch.cuda.synchronize()
        monkeypatch.setattr(torch.cuda.Stream, "wait_event", lambda self, event: None)
        matches = _run_chain(fast, model, n)
    assert not all(matches), "removing the stream waits went unnoticed: the ordering tests cannot catch a race"
