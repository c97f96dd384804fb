"""Cost of the NaN-exact max-type lowerings on CPU: ResNet-18's lowered ONNX model (one max pool, whose NaN mask
is pooled alongside the values) against the same model with that guard cut out (the Where's consumers read the
plain MaxPool again, the guard's nodes are dropped), i.e. the lowering before it was NaN-exact. Sessions use the
delegate's own options; runs alternate between the two, and both are checked to give the same output.

    .venv/bin/python benchmarks/bench_nan_guard.py [--model resnet18] [--rounds 15] [--runs 10] [--threads 2]
"""
from __future__ import annotations

import argparse
import pathlib
import platform
import statistics
import subprocess
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def lowered(name: str):
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
    return lower_to_onnx(ex.module, [tuple(x.shape)], [x.dtype]), x.numpy()


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
    import onnxruntime as ort
    from hybrid_trt.delegates.onnxruntime_delegate import _session_options

    guarded, x = lowered(args.model)
    plain, guards = without_nan_guard(guarded)
    sessions = {k: ort.InferenceSession(m.SerializeToString(), _session_options(args.threads),
                                        providers=["CPUExecutionProvider"])
                for k, m in (("NaN-exact", guarded), ("no NaN guard", plain))}
    feed = {sessions["NaN-exact"].get_inputs()[0].name: x}
    outs = {k: s.run(None, feed)[0] for k, s in sessions.items()}
    np.testing.assert_allclose(outs["NaN-exact"], outs["no NaN guard"], rtol=1e-6, atol=1e-6)
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
    print("| variant | latency ms | ratio |\n|---|---|---|")
    for k, t in times.items():
        med = statistics.median(t)
        print(f"| {k} | {med * 1e3:.2f} | {med / base:.3f} |")


if __name__ == "__main__":
    main()
