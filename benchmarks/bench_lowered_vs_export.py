"""hybrid_trt's lowered ONNX against torch.onnx.export's graph of the same model, on ONNX Runtime (CPU): op counts
before and after ONNX Runtime's optimizer, and the raw session time of the delegated partitions against the
exported whole model, in paired rounds in one process.

    .venv/bin/python benchmarks/bench_lowered_vs_export.py [--model convnext_tiny] [--size 224]
        [--baseline-tree DIR] [--threads 2] [--rounds 10] [--iters 10] [--out FILE]

The partitions are lowered through the project's own path (``torch.compile(model, backend="hybrid_trt")``, then
``lower_partition`` of each delegated partition's FX module at its input shapes), in a subprocess per source tree:
this checkout, and with ``--baseline-tree`` another one (e.g. ``git archive <commit> | tar -x -C DIR``), so a
lowering change is measured against the lowering it replaces in the same run. Every session (each tree's
partitions and the exported whole model) is built with hybrid_trt's session options (``--threads`` intra-op
threads, no spinning, full graph optimisation) and run on pre-bound buffers (``run_with_iobinding``), so the
figures compare ONNX Runtime's work on each graph and nothing else: no Dynamo, no seams, no Inductor.

Each round times every variant (``--iters`` calls, median) in a rotating order; a variant's figure is the median
over rounds, its ratio the median of the per-round ratios to the exported whole model. The load average at the
start and end is printed: on a shared machine, only the ratios mean anything.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CHILD = r"""
import json, os, sys
sys.path.insert(0, os.environ["TREE"])
import onnx, torch, torchvision
torch.set_num_threads(int(os.environ["THREADS"]))
import hybrid_trt
from hybrid_trt.engines.runtime import REGISTRY
from hybrid_trt.lowerings.to_onnx import lower_partition
out_dir, name, size = os.environ["OUT_DIR"], os.environ["MODEL"], int(os.environ["SIZE"])
torch.manual_seed(0)
model = torchvision.models.get_model(name, weights=None).eval()
x = torch.randn(1, 3, size, size)
before = set(REGISTRY.live.keys())
with torch.no_grad():
    torch.compile(model, backend="hybrid_trt", options={"cache": False, "num_threads": int(os.environ["THREADS"])})(x)
runtimes = sorted((REGISTRY.live[k] for k in set(REGISTRY.live.keys()) - before),
                  key=lambda rt: int(rt.name.split()[-1]))
parts = []
for k, rt in enumerate(runtimes):
    engine = getattr(rt._static_engine, "__self__", rt._static_engine)
    shapes = [tuple(i.shape) for i in engine._session.get_inputs()]  # a static engine: every dim a number
    inputs = [torch.randn(s) for s in shapes]
    # the target the runtime lowered for (ORT_CPU here), where the tree has one
    target = {"target": rt.lowering_target} if hasattr(rt, "lowering_target") else {}
    model_proto, _metas = lower_partition(rt.module, shapes, [torch.float32] * len(shapes), **target)
    path = os.path.join(out_dir, f"part{k}.onnx")
    onnx.save(model_proto, path)
    with torch.no_grad():
        eager = rt.module(*inputs)
    torch.save({"inputs": inputs, "eager": list(eager)}, os.path.join(out_dir, f"part{k}.pt"))
    parts.append({"path": path, "shapes": shapes, "ops": rt.report.op_count})
print("RESULT " + json.dumps(parts))
"""


def lower_in_tree(tree: str, model: str, size: int, threads: int, out_dir: str) -> list:
    """The delegated partitions of ``model`` as lowered by the hybrid_trt in ``tree`` (ONNX files, in order)."""
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "TREE": os.path.abspath(tree), "MODEL": model, "SIZE": str(size),
               "THREADS": str(threads), "OUT_DIR": out_dir, "PYTHONPATH": os.path.abspath(tree),
               "XDG_CACHE_HOME": os.path.join(tmp, "xdg"), "TORCHINDUCTOR_CACHE_DIR": os.path.join(tmp, "inductor")}
        proc = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True,
                              cwd=os.path.abspath(tree))
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if line is None:
        raise RuntimeError(f"lowering in {tree} failed:\n{proc.stderr[-3000:]}")
    return json.loads(line[len("RESULT "):])


def export_whole(model_name: str, size: int, path: str):
    import torch
    import torchvision
    torch.manual_seed(0)
    model = torchvision.models.get_model(model_name, weights=None).eval()
    x = torch.randn(1, 3, size, size)
    with torch.no_grad():
        torch.onnx.export(model, (x,), path, dynamo=True, optimize=True, verbose=False)
    return [tuple(x.shape)]


class Session:
    """A session with hybrid_trt's options on pre-bound random inputs; ``optimized``: ONNX Runtime's graph."""

    def __init__(self, path: str, shapes: list, threads: int):
        import onnx
        import torch
        from hybrid_trt.delegates import get_delegate
        delegate = get_delegate("onnxruntime")
        opts = {"provider": "cpu", "threads": threads, "tf32_convolutions": False, "tf32_matmul": False}
        with tempfile.TemporaryDirectory() as tmp:
            opt_path = os.path.join(tmp, "opt.onnx")
            with open(path, "rb") as f:
                model_bytes = f.read()
            if any(t.data_location == onnx.TensorProto.EXTERNAL for t in onnx.load(path, load_external_data=False)
                   .graph.initializer):
                model_bytes = onnx.load(path).SerializeToString()  # the exporter writes weights beside the model
            self.session, _ = delegate.session(model_bytes, torch.device("cpu"), opts, optimized_path=opt_path)
            self.optimized = onnx.load(opt_path)
        self.lowered = onnx.load(path, load_external_data=False)
        self.binding = self.session.io_binding()
        self.held = []
        for info, shape in zip(self.session.get_inputs(), shapes):
            t = torch.randn(shape)
            self.binding.bind_input(info.name, "cpu", 0, t.numpy().dtype, list(shape), t.data_ptr())
            self.held.append(t)
        for info in self.session.get_outputs():
            self.binding.bind_output(info.name, "cpu")

    def run(self) -> None:
        self.session.run_with_iobinding(self.binding)

    def check(self, inputs, expected) -> float:
        """Max abs error of this session against the partition's FX module run eagerly on the same inputs."""
        import torch
        feeds = {i.name: t.contiguous().numpy() for i, t in zip(self.session.get_inputs(), inputs)}
        outs = self.session.run(None, feeds)
        return max(float((torch.from_numpy(o) - e).abs().max()) for o, e in zip(outs, expected))


def op_counts(model) -> collections.Counter:
    return collections.Counter((f"{n.domain}:" if n.domain else "") + n.op_type for n in model.graph.node)


def timed(variants: dict, rounds: int, iters: int) -> dict:
    samples = {v: [] for v in variants}
    for sessions in variants.values():  # warm-up
        for _ in range(3):
            for s in sessions:
                s.run()
    names = list(variants)
    for r in range(rounds):
        for v in names[r % len(names):] + names[:r % len(names)]:
            times = []
            for _ in range(iters):
                t0 = time.perf_counter()
                for s in variants[v]:
                    s.run()
                times.append(time.perf_counter() - t0)
            samples[v].append(statistics.median(times) * 1e3)
    return samples


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="convnext_tiny", help="a torchvision classifier (random weights)")
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--baseline-tree", default=None, help="another source tree whose lowering is measured too")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--out", default=None, help="write the markdown here as well as to stdout")
    args = ap.parse_args()
    sys.path.insert(0, ROOT)
    import torch
    torch.set_num_threads(args.threads)
    load0 = os.getloadavg()
    work = tempfile.mkdtemp(prefix="lowered_vs_export_")
    trees = {"hybrid_trt": ROOT}
    if args.baseline_tree:
        trees = {"baseline": args.baseline_tree, **trees}
    variants, lowered, errors = {}, {}, {}
    for label, tree in trees.items():
        out_dir = os.path.join(work, label)
        os.makedirs(out_dir)
        parts = lower_in_tree(tree, args.model, args.size, args.threads, out_dir)
        sessions = [Session(p["path"], p["shapes"], args.threads) for p in parts]
        for p, s in zip(parts, sessions):
            ref = torch.load(p["path"].replace(".onnx", ".pt"))
            errors.setdefault(label, []).append(s.check(ref["inputs"], ref["eager"]))
        variants[label], lowered[label] = sessions, parts
    whole_path = os.path.join(work, "whole.onnx")
    variants["onnxruntime_whole"] = [Session(whole_path, export_whole(args.model, args.size, whole_path),
                                             args.threads)]
    samples = timed(variants, args.rounds, args.iters)
    load1 = os.getloadavg()

    ref = samples["onnxruntime_whole"]
    lines = [f"### {args.model}, 1x3x{args.size}x{args.size}: lowered partitions vs torch.onnx.export's whole model",
             "", f"`{' '.join(['.venv/bin/python', 'benchmarks/bench_lowered_vs_export.py'] + sys.argv[1:])}`; "
             f"load average {load0[0]:.1f} at the start, {load1[0]:.1f} at the end; {args.threads} threads, "
             f"{args.rounds} rounds x {args.iters} calls.", "",
             "| variant | partitions (ops) | raw session ms (median of rounds) | vs ORT whole (median of per-round "
             "ratios) | max abs err vs the partitions' FX modules |", "|---|---|---|---|---|"]
    for v, s in samples.items():
        ratio = statistics.median(a / b for a, b in zip(s, ref))
        parts = ", ".join(str(p["ops"]) for p in lowered[v]) if v in lowered else "1 (exported)"
        err = f"{max(errors[v]):.1e}" if v in errors else "-"
        lines.append(f"| {v} | {len(variants[v])}: {parts} | {statistics.median(s):.2f} | {ratio:.2f} | {err} |")
    lines += ["", "ONNX op counts (summed over partitions), as lowered / after ONNX Runtime's optimizer:", "",
              "| variant | lowered | optimized |", "|---|---|---|"]
    for v, sessions in variants.items():
        low = sum((op_counts(s.lowered) for s in sessions), collections.Counter())
        opt = sum((op_counts(s.optimized) for s in sessions), collections.Counter())
        fmt = lambda c: ", ".join(f"{k} {n}" for k, n in c.most_common())  # noqa: E731
        lines.append(f"| {v} | {sum(low.values())}: {fmt(low)} | {sum(opt.values())}: {fmt(opt)} |")
    text = "\n".join(lines)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
