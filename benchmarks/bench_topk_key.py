"""Cost of the finite TopK key (issue 7): the onnxruntime delegate's topk/sort engines lowered as today (float32
input ranked by a float64 key, lowering target GENERIC/ORT_CPU) against the float32 key the tensorrt target keeps
(NaN as +inf, the lowering before session 24), on the same device, interleaved, median ms per call.

    python benchmarks/bench_topk_key.py --device cuda --out /tmp/topk_key.md
"""
from __future__ import annotations

import argparse
import operator
import platform
import statistics
import subprocess
import time

import torch
import torch.fx as fx

from hybrid_trt import Options
from hybrid_trt.delegates import get_delegate
from hybrid_trt.lowerings.context import GENERIC, ORT_CPU, TENSORRT
from hybrid_trt.lowerings.to_onnx import lower_to_onnx

aten = torch.ops.aten
CASES = [  # (what, op, input shape, extra args): a detector's score top-k, a smaller head's, a row sort
    ("topk 1000 of 120000 (RetinaNet-like scores)", aten.topk.default, (1, 120000), (1000,)),
    ("topk 300 of 20000", aten.topk.default, (1, 20000), (300,)),
    ("sort 8 rows of 4096", aten.sort.default, (8, 4096), (-1, True)),
]


def engine(op, shape, extra, device, target):
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
    model = lower_to_onnx(gm, [shape], [torch.float32], (), target=target)
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
    wide = ORT_CPU if a.device == "cpu" else GENERIC
    gpu = torch.cuda.get_device_name() if a.device == "cuda" else platform.processor() or platform.machine()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    lines = [f"machine: {gpu}, {a.device}; torch {torch.__version__}; commit {commit}; {a.rounds} interleaved rounds",
             "", "| case | float64 key ms | float32 key ms | ratio |", "|---|---|---|---|"]
    for what, op, shape, extra in CASES:
        runs = {k: engine(op, shape, extra, a.device, t) for k, t in (("f64", wide), ("f32", TENSORRT))}
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
