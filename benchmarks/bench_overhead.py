"""Where the per-call time of a hybrid_trt model goes, layer by layer (CPU).

    python benchmarks/bench_overhead.py [--models resnet18,mobilenet_v3_large] [--threads 2] [--out FILE]

For each model the layers below are called in turn, once per round (A B C ... A B C ...), and a layer's cost is
the median of the paired per-round differences, which cancels most of the drift of a shared machine:
  hybrid   the torch.compile'd model: Dynamo's frame, then the callable it calls. For a graph of delegate calls
           alone that is the direct call (stitch/direct.py, PartitionRuntime.run without the dispatcher); for
           any other graph AOTAutograd's wrapper, Inductor's code and the delegate op
  dynamo   the same model under torch.compile with a backend that only calls the delegate op on the input
           (so "hybrid - dynamo" is negative where hybrid calls directly: the op's dispatcher is then skipped)
  op       torch.ops.hybrid_trt.delegate called directly (dispatcher, key lookup, partition runtime, engine)
  engine   the ONNX Runtime engine object (contiguity, output allocation, IO binding, run)
  raw      InferenceSession.run_with_iobinding of that partition on pre-bound buffers
  frame    torch.compile with a backend that returns a constant: Dynamo's frame alone (guards, every
           parameter loaded to be passed as a graph input), no work
  raw_all  every partition's session on pre-bound buffers (what hybrid cannot avoid)
  ort      ONNX Runtime on the whole model exported by torch.onnx (bench_models.py's baseline)
"raw - ORT whole" is not overhead: it compares the partition's ONNX graph (hybrid_trt's lowering) with the
exporter's, run by the same runtime. For fully delegated models against ONNX Runtime on the whole model, with
Dynamo's guard settings and before/after figures, see bench_cpu_whole.py.

Every compiled copy of a model gets a ``forward`` code object of its own (bench_cpu_whole._own_code): Dynamo keeps
compiled frames per code object, so copies compiled under different settings would otherwise share (and be served
by) one another's frames; before this, the --frame table reset Dynamo between variants, and the earlier variants
recompiled under default settings at their first timed call.
"""
from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def _op_only_backend(key: str):
    """A Dynamo backend whose compiled graph only calls the delegate op on the model input."""
    import torch

    def backend(gm, example_inputs):
        user = [i for i, t in enumerate(example_inputs) if isinstance(t, torch.Tensor)
                and not isinstance(t, torch.nn.Parameter) and getattr(t, "_dynamo_static_input_type", None) is None]

        def run(*args):
            return torch.ops.hybrid_trt.delegate(key, [args[i] for i in user], [])
        return run
    return backend


def _frame_only_backend(result):
    """A Dynamo backend whose compiled graph returns a constant: what is left is Dynamo's own frame (guards,
    loading every parameter to pass it as a graph input)."""
    def backend(gm, example_inputs):
        return lambda *args: result
    return backend


def _paired(fns: dict, n: int) -> dict:
    """Each callable once per round, ``n`` rounds; returns per-call samples (seconds) by name."""
    ts = {k: [] for k in fns}
    for fn in fns.values():
        for _ in range(3):
            fn()
    for _ in range(n):
        for k, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            ts[k].append(time.perf_counter() - t0)
    return ts


def _median_ms(samples: list) -> float:
    return statistics.median(samples) * 1e3


# Dynamo settings that decide what its frame costs per call; each variant is compiled under its patch (guards are
# built at compile time) and all are called in the same alternating rounds.
FRAME_VARIANTS = {
    "default": {},
    "install_free_tensors": {"install_free_tensors": True},  # parameters become graph constants, not inputs
    "recursive_dict_tags": {"use_recursive_dict_tags_for_guards": True},  # module guards skipped by dict tags
}


def frame_table(models, threads: int, calls: int) -> list:
    """Per model: Dynamo's frame alone (a backend that returns a constant) and the hybrid model, under each of
    FRAME_VARIANTS, plus the frame with guard evaluation skipped (set_stance skip_guard_eval_unsafe, unsafe)."""
    import torch
    import bench_models
    import hybrid_trt  # noqa: F401
    from bench_cpu_whole import _own_code
    lines = ["| model | graph inputs (default / free tensors) | "
             + " | ".join(f"frame {k} ms" for k in FRAME_VARIANTS) + " | frame skip_guard_eval_unsafe ms | "
             + " | ".join(f"hybrid {k} ms" for k in FRAME_VARIANTS) + " | ORT whole ms |",
             "|---|---|" + "---|" * (2 * len(FRAME_VARIANTS) + 2)]
    with torch.no_grad():
        for name in models:
            model, x = bench_models._build(name)
            fns, n_inputs = {}, {}
            torch._dynamo.reset()
            for k, patch in FRAME_VARIANTS.items():
                seen = []

                def backend(gm, example_inputs, seen=seen):
                    seen.append(len(example_inputs))
                    return lambda *args: torch.zeros(1)
                with torch._dynamo.config.patch(patch):
                    frame = torch.compile(_own_code(copy.deepcopy(model), f"frame_{k}"), backend=backend)
                    frame(x)
                    hybrid = torch.compile(_own_code(copy.deepcopy(model), f"hybrid_{k}"), backend="hybrid_trt",
                                           options={"num_threads": threads})
                    hybrid(x)
                n_inputs[k] = seen[0]
                fns[f"frame {k}"] = (lambda f: lambda: f(x))(frame)
                fns[f"hybrid {k}"] = (lambda f: lambda: f(x))(hybrid)
                if k == "default":
                    default_frame = frame

            def skip_guards():
                with torch.compiler.set_stance(skip_guard_eval_unsafe=True):
                    return default_frame(x)
            fns["frame skip"] = skip_guards
            ort = bench_models._ort_whole(model, x)
            fns["ort"] = lambda: ort(x)
            ts = _paired(fns, calls)
            m = {k: _median_ms(v) for k, v in ts.items()}
            row = (f"| {name} | {n_inputs['default']} / {n_inputs['install_free_tensors']} | "
                   + " | ".join(f"{m[f'frame {k}']:.3f}" for k in FRAME_VARIANTS) + f" | {m['frame skip']:.3f} | "
                   + " | ".join(f"{m[f'hybrid {k}']:.3f}" for k in FRAME_VARIANTS) + f" | {m['ort']:.3f} |")
            lines.append(row)
            print(row, flush=True)
    return lines


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="resnet18,detector,transformer",
                    help="examples/models.py names or torchvision classifiers (e.g. mobilenet_v3_large)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--calls", type=int, default=200, help="alternating rounds (each layer once per round)")
    ap.add_argument("--frame", action="store_true", help="Dynamo's frame under the settings of FRAME_VARIANTS "
                                                         "instead of the layer table")
    ap.add_argument("--out")
    args = ap.parse_args()
    import torch
    import bench_models
    import hybrid_trt  # noqa: F401
    from bench_cpu_whole import _own_code
    from hybrid_trt.engines.runtime import REGISTRY
    bench_models.THREADS = args.threads
    torch.set_num_threads(args.threads)
    if args.frame:
        lines = [f"Machine: {bench_models.machine()}", ""] + frame_table(args.models.split(","), args.threads,
                                                                         args.calls)
        text = "\n".join(lines) + "\n"
        print(text)
        if args.out:
            with open(args.out, "w") as f:
                f.write(text)
        return
    lines = [f"Machine: {bench_models.machine()}", "",
             "| model | partitions | hybrid ms | ORT whole ms | hybrid / ORT whole | raw partition sessions ms | "
             "hybrid - dynamo (direct call: negative; else AOT + Inductor wrappers) | dynamo - op (Dynamo frame + "
             "op call) | frame only "
             "(Dynamo, no work) | op - engine (dispatcher, key lookup) | engine - raw (binding, outputs) | "
             "raw - ORT whole (the partition's ONNX vs torch.onnx's) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    print(lines[0], flush=True)
    with torch.no_grad():
        for name in args.models.split(","):
            model, x = bench_models._build(name)
            torch._dynamo.reset()
            before = set(REGISTRY.live.keys())
            hybrid = torch.compile(model, backend="hybrid_trt", options={"num_threads": args.threads})
            hybrid(x)
            runtimes = [REGISTRY.live[k] for k in sorted(set(REGISTRY.live.keys()) - before)]
            # The partition fed by the model input is timed alone; multi-partition models show the others in
            # hybrid - raw only.
            first = [rt for rt in runtimes if rt._static_engine is not None][0]
            engine = first._static_engine
            binding, held = bench_models._bind_fresh(engine)
            inputs = [x] if len(engine._inputs) == 1 else [held[i] for i in range(len(engine._inputs))]
            dynamo_only = torch.compile(_own_code(copy.deepcopy(model), "dynamo"), backend=_op_only_backend(first.key))
            dynamo_only(x)
            frame_only = torch.compile(_own_code(copy.deepcopy(model), "frame"),
                                       backend=_frame_only_backend(torch.zeros(1)))
            frame_only(x)
            bindings = [bench_models._bind_fresh(rt._static_engine) for rt in runtimes
                        if rt._static_engine is not None]

            def raw_all():
                for rt, (b, _held) in zip(runtimes, bindings):
                    rt._static_engine._session.run_with_iobinding(b)
            ort = bench_models._ort_whole(model, x)
            fns = {
                "hybrid": lambda: hybrid(x),
                "dynamo": lambda: dynamo_only(x),
                "op": lambda: torch.ops.hybrid_trt.delegate(first.key, inputs, []),
                "engine": lambda: engine(inputs),
                "raw": lambda: engine._session.run_with_iobinding(binding),
                "frame": lambda: frame_only(x),
                "raw_all": raw_all,
                "ort": lambda: ort(x),
            }
            ts = _paired(fns, args.calls)
            m = {k: _median_ms(v) for k, v in ts.items()}

            def diff(a, b):  # median of the paired differences: cancels the drift of a shared machine
                return _median_ms([p - q for p, q in zip(ts[a], ts[b])])
            row = (f"| {name} | {len(runtimes)} | {m['hybrid']:.3f} | {m['ort']:.3f} | "
                   f"{m['hybrid'] / m['ort']:.3f} | {m['raw_all']:.3f} | {diff('hybrid', 'dynamo'):.3f} | "
                   f"{diff('dynamo', 'op'):.3f} | {m['frame']:.3f} | {diff('op', 'engine'):.3f} | "
                   f"{diff('engine', 'raw'):.3f} | {diff('raw_all', 'ort'):.3f} |")
            lines.append(row)
            print(row, flush=True)
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
