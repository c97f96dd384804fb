"""Cost of the finite TopK key's type (issue 7): the onnxruntime delegate's float32 topk/sort engines as lowered
(a float32 key, +-inf and NaN just below float32's largest) against the same lowering with a float64 key (exact
order for every float32, the variant session 24 measured first), on the same device, interleaved, median ms per
call. Each engine's values are checked against eager first.

    python benchmarks/bench_topk_key.py --device cuda --out /tmp/topk_key.md
"""
from __future__ import annotations

import argparse
import operator
import platform
import statistics
import subprocess
import time
from unittest import mock

import torch
import torch.fx as fx

from hybrid_trt import Options
from hybrid_trt.delegates import get_delegate
from hybrid_trt.lowerings.context import GENERIC, ORT_CPU
from hybrid_trt.lowerings.ops import indexing
from hybrid_trt.lowerings.to_onnx import lower_to_onnx

aten = torch.ops.aten
CASES = [  # (what, op, input shape, extra args): a detector's score top-k, a smaller head's, a row sort
    ("topk 1000 of 120000 (RetinaNet-like scores)", aten.topk.default, (1, 120000), (1000,)),
    ("topk 300 of 20000", aten.topk.default, (1, 20000), (300,)),
    ("sort 8 rows of 4096", aten.sort.default, (8, 4096), (-1, True)),
]


def engine(op, shape, extra, device, key_type):
    graph = fx.Graph()
    x = graph.placeholder("x")
    out = graph.call_function(op, (x, *extra))
    graph.output((graph.call_function(operator.getitem, (out, 0)), graph.call_function(operator.getitem, (out, 1))))
    gm = fx.GraphModule(torch.nn.Module(), graph)
    example = torch.rand(shape, device=device)
    expected = list(op(example, *extra))
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp
    FakeTensorProp(gm, FakeTensorMode(allow_non_fake_inputs=True)).propagate(example)
    with mock.patch.dict(indexing._KEY_TYPES, {torch.float32: key_type}):
        model = lower_to_onnx(gm, [shape], [torch.float32], (), target=ORT_CPU if device == "cpu" else GENERIC)
    delegate = get_delegate("onnxruntime")
    run = delegate.build(model, expected, torch.device(device), delegate.options_from(Options()))
    got = run([example])
    assert torch.equal(got[0], expected[0]), "values differ from eager"
    return run, example


def timed(run, x, device):
    if device == "cuda":
        torch.cuda.synchronize()
    t = time.perf_counter()
    run([x])
    if device == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - t) * 1e3


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cpu")
    p.add_argument("--rounds", type=int, default=200)
    p.add_argument("--out")
    a = p.parse_args()
    gpu = torch.cuda.get_device_name() if a.device == "cuda" else platform.processor() or platform.machine()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    lines = [f"machine: {gpu}, {a.device}; torch {torch.__version__}; commit {commit}; {a.rounds} interleaved rounds",
             "", "| case | float64 key ms | float32 key ms | ratio |", "|---|---|---|---|"]
    for what, op, shape, extra in CASES:
        runs = {k: engine(op, shape, extra, a.device, t) for k, t in (("f64", torch.float64), ("f32", torch.float32))}
        for r in runs.values():
            for _ in range(10):
                timed(*r, a.device)
        ms = {k: [] for k in runs}
        for _ in range(a.rounds):
            for k, r in runs.items():
                ms[k].append(timed(*r, a.device))
        f64, f32 = statistics.median(ms["f64"]), statistics.median(ms["f32"])
        lines.append(f"| {what} | {f64:.3f} | {f32:.3f} | {f64 / f32:.2f} |")
    text = "\n".join(lines)
    print(text)
    if a.out:
        open(a.out, "w").write(text + "\n")


if __name__ == "__main__":
    main()
