"""Where the per-call time of a hybrid_trt model goes, layer by layer (CPU).

    python benchmarks/bench_overhead.py [--models resnet18,transformer] [--threads 2]

For each model, the layers are called in turn (A B C D A B C D ...), and each layer's cost is the median of
the paired differences, which cancels the drift of a shared machine:
  hybrid   the torch.compile'd model (Dynamo frame, AOT wrappers, Inductor's wrapper, the delegate op)
  dynamo   the same model under torch.compile with a backend that only calls the delegate op (Dynamo's frame:
           guards and loading every parameter to pass it as a graph input)
  op       torch.ops.hybrid_trt.delegate called directly (dispatcher + partition runtime + engine)
  engine   the ONNX Runtime engine object (contiguity, output allocation, IO binding, run)
  raw      InferenceSession.run_with_iobinding on pre-bound buffers
then the same hybrid model again while a whole-model ONNX Runtime session and an Inductor (freezing) model of
the same network run in the same interleaved rounds, as in bench_models.py (thread pools of other runtimes
in the process).
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


def _rounds(fns: dict, rounds: int, iters: int) -> dict:
    times = {k: [] for k in fns}
    for fn in fns.values():
        for _ in range(3):
            fn()
    for _ in range(rounds):
        for k, fn in fns.items():
            for _ in range(iters):
                t0 = time.perf_counter()
                fn()
                times[k].append(time.perf_counter() - t0)
    return {k: statistics.median(v) * 1e3 for k, v in times.items()}


def _paired(fns: dict, n: int) -> dict:
    names = list(fns)
    ts = {k: [] for k in names}
    for fn in fns.values():
        for _ in range(3):
            fn()
    for _ in range(n):
        for k in names:
            t0 = time.perf_counter()
            fns[k]()
            ts[k].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) * 1e3 for k, v in ts.items()}
    for a, b in zip(names, names[1:]):
        med[f"{a}-{b}"] = statistics.median([p - q for p, q in zip(ts[a], ts[b])]) * 1e3
    return med


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="resnet18,detector,transformer")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--no-inductor", action="store_true", help="skip the Inductor (freezing) model (slow compile)")
    args = ap.parse_args()
    import torch
    import bench_models
    import hybrid_trt  # noqa: F401
    from examples.models import build
    from hybrid_trt.engines.runtime import REGISTRY
    _RUNTIMES = REGISTRY.live  # content key -> live partition runtime
    bench_models.THREADS = args.threads
    torch.set_num_threads(args.threads)
    print(f"Machine: {bench_models.machine()}")
    print("| model | hybrid ms | raw session ms | hybrid - dynamo (AOT + Inductor wrappers) | dynamo - op (Dynamo "
          "frame) | op - engine (dispatcher) | engine - raw (binding, outputs) | hybrid (other runtimes "
          "interleaved) | ORT whole | Inductor freezing |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    with torch.no_grad():
        for name in args.models.split(","):
            model, x = build(name)
            before = set(_RUNTIMES.keys())
            hybrid = torch.compile(model, backend="hybrid_trt", options={"num_threads": args.threads})
            hybrid(x)
            runtimes = [_RUNTIMES[h] for h in sorted(set(_RUNTIMES.keys()) - before)]
            # The first partition fed by the model input is timed alone; multi-partition models show it in
            # hybrid - raw only.
            rt = runtimes[0]
            engine = rt._static_engine
            binding, held = bench_models._bind_fresh(engine)
            inputs = [held[i] for i in range(len(engine._inputs))]
            dynamo_only = torch.compile(copy.deepcopy(model), backend=_op_only_backend(rt.key))
            dynamo_only(x)
            fns = {
                "hybrid": lambda: hybrid(x),
                "dynamo": lambda: dynamo_only(x),
                "op": lambda: torch.ops.hybrid_trt.delegate(rt.key, inputs, []),
                "engine": lambda: engine(inputs),
                "raw": lambda: engine._session.run_with_iobinding(binding),
            }
            alone = _paired(fns, args.rounds * args.iters)
            raw_all = 0.0
            for r in runtimes:
                e = r._static_engine
                b, h = bench_models._bind_fresh(e)
                raw_all += _rounds({"raw": lambda: e._session.run_with_iobinding(b)}, args.rounds, args.iters)["raw"]
            ort = bench_models._ort_whole(model, x)
            mixed_fns = {"ort": lambda: ort(x), "hybrid": lambda: hybrid(x)}
            if not args.no_inductor:
                ind = torch.compile(model, backend="inductor", options={"freezing": True})
                ind(x)
                mixed_fns = {"inductor": lambda: ind(x), **mixed_fns}
            mixed = _rounds(mixed_fns, args.rounds, args.iters)
            print(f"| {name} ({len(runtimes)} partition(s)) | {alone['hybrid']:.3f} | {raw_all:.3f} | "
                  f"{alone['hybrid-dynamo']:.3f} | {alone['dynamo-op']:.3f} | {alone['op-engine']:.3f} | "
                  f"{alone['engine-raw']:.3f} | "
                  f"{mixed['hybrid']:.3f} | {mixed['ort']:.3f} | {mixed.get('inductor', float('nan')):.3f} |", flush=True)


if __name__ == "__main__":
    main()
