"""Cost of the NaN-exact max-type lowerings on CPU: ResNet-18's lowered ONNX model (one max pool) three ways:
- "NaN-exact, generic": the form for any backend, whose NaN mask (IsNaN, Cast) is pooled alongside the values;
- "NaN-exact, ORT_CPU": the form the onnxruntime delegate lowers for its CPU provider (MaxPool times a factor from
  depthwise convolutions, operators ONNX Runtime keeps in its NCHWc layout);
- "no NaN guard": the generic model with the guard cut out (the Where's consumers read the plain MaxPool again,
  the guard's nodes are dropped), i.e. the lowering before it was NaN-exact.
Sessions use the delegate's own options; runs alternate between the variants, and all are checked to give the
same output. Each variant's count of NCHWc layout reorders in ONNX Runtime's optimized graph is printed too.

    .venv/bin/python benchmarks/bench_nan_guard.py [--model resnet18] [--rounds 15] [--runs 10] [--threads 2]
"""
from __future__ import annotations

import argparse
import os
import pathlib
import platform
import statistics
import subprocess
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def lowered(name: str, target: str):
    """(ONNX model of the model's single delegated partition, example input as numpy), captured by the project's
    own torch.export front end, so the graph is the one hybrid_trt.export partitions."""
    from examples.models import build
    from hybrid_trt.capture.exported import capture_export
    from hybrid_trt.delegates import get_delegate
    from hybrid_trt.lowerings import lower_to_onnx
    from hybrid_trt.partitioner import partition_graph
    from hybrid_trt.partitioner.extract import extract

    model, x = build(name)
    cap = capture_export(model.eval(), (x,))
    placeholders = [n for n in cap.gm.graph.nodes if n.op == "placeholder"]
    constants = {placeholders[i]: w for i, w in cap.weights.items()}
    plan = partition_graph(cap.gm.graph, [get_delegate("onnxruntime")], min_block_size=3)
    assert len(plan.partitions) == 1, "expected one delegated partition"
    ex = extract(plan.partitions[0], constants)
    return lower_to_onnx(ex.module, [tuple(x.shape)], [x.dtype], target=target), x.numpy()


def without_nan_guard(model):
    """Copy of ``model`` whose NaN guards (Where(Greater(pooled NaN mask, 0), NaN, value)) read ``value`` again."""
    import onnx
    m = onnx.ModelProto()
    m.CopyFrom(model)
    producer = {o: n for n in m.graph.node for o in n.output}
    rename = {}
    for n in m.graph.node:
        cond = producer.get(n.input[0]) if n.op_type == "Where" else None
        mask = producer.get(cond.input[0]) if cond is not None and cond.op_type == "Greater" else None
        if mask is not None and any(producer.get(i, None) is not None and producer[i].op_type == "Cast"
                                    and producer[producer[i].input[0]].op_type == "IsNaN" for i in mask.input):
            rename[n.output[0]] = n.input[2]
    assert rename, "no NaN guard found in the lowered model"
    for n in m.graph.node:
        n.input[:] = [rename.get(i, i) for i in n.input]
    for o in m.graph.output:
        o.name = rename.get(o.name, o.name)
    needed, keep = {o.name for o in m.graph.output}, []
    for n in reversed(m.graph.node):  # nodes are in topological order: drop what no output needs
        if any(o in needed for o in n.output):
            keep.append(n)
            needed.update(n.input)
    del m.graph.node[:]
    m.graph.node.extend(reversed(keep))
    return m, len(rename)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--runs", type=int, default=10, help="runs per round and variant (the median is kept)")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    import tempfile

    import onnx
    import onnxruntime as ort
    from hybrid_trt.delegates.onnxruntime_delegate import _session_options
    from hybrid_trt.lowerings.context import GENERIC, ORT_CPU

    guarded, x = lowered(args.model, GENERIC)
    plain, guards = without_nan_guard(guarded)
    for_cpu, _ = lowered(args.model, ORT_CPU)
    sessions, reorders = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for k, m in (("NaN-exact, generic", guarded), ("NaN-exact, ORT_CPU", for_cpu), ("no NaN guard", plain)):
            so = _session_options(args.threads)
            so.optimized_model_filepath = f"{tmp}/optimized.onnx"
            sessions[k] = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
            reorders[k] = sum(n.op_type.startswith("Reorder") for n in onnx.load(so.optimized_model_filepath).graph.node)
    feed = {sessions["no NaN guard"].get_inputs()[0].name: x}
    outs = {k: s.run(None, feed)[0] for k, s in sessions.items()}
    for k, out in outs.items():
        np.testing.assert_allclose(out, outs["no NaN guard"], rtol=1e-6, atol=1e-6, err_msg=k)
    before = " ".join(f"{v:.2f}" for v in os.getloadavg())
    times = {k: [] for k in sessions}
    for _ in range(args.rounds):
        for k, s in sessions.items():  # alternating, so load drift on the shared machine hits both alike
            per_run = []
            for _ in range(args.runs):
                t0 = time.perf_counter()
                s.run(None, feed)
                per_run.append(time.perf_counter() - t0)
            times[k].append(statistics.median(per_run))
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    base = statistics.median(times["no NaN guard"])
    print(f"{args.model}, CPU, onnxruntime {ort.__version__}, {args.threads} intra-op threads, "
          f"{platform.processor() or platform.machine()}, commit {commit}; {guards} NaN guard(s); "
          f"median of {args.rounds} alternating rounds (each the median of {args.runs} runs)\n")
    print(f"load average before: {before}; after: {' '.join(f'{v:.2f}' for v in os.getloadavg())}\n")
    print("| variant | latency ms | ratio | NCHWc reorders in ORT's optimized graph |\n|---|---|---|---|")
    for k, t in times.items():
        med = statistics.median(t)
        print(f"| {k} | {med * 1e3:.2f} | {med / base:.3f} | {reorders[k]} |")


if __name__ == "__main__":
    main()
