"""Where the host time of one whole-runner call goes on a GPU (issue 10: EfficientNet-B0's call took 0.45 ms of host
time on an H100 against 0.06 for a bare replay of the same kernels; cudagraph_call_profile_h100.md).

    python benchmarks/probe_whole_runner_layers.py [--models efficientnet_b0] [--dtype fp16] [--batch 1]
                                                  [--calls 2000] [--out layers.md]

Per model, in one process: hybrid_trt compiled with ``cuda_graph_runner="whole"`` (measured placement, as
bench_cudagraphs.py's "hybrid CG MP whole"), with and without README "Per-call cost"'s guard recipe, and the
floor (Inductor's default compile captured by hand, bench_cudagraphs.py's "CG floor"), once as torch captures by
default and once with ``keep_graph=True`` as the runner captures (it inspects the graph's nodes). The runner
objects are found by recording those the backend makes. Each layer is timed alone, as host time (launch to
return, the GPU idle before each call), in interleaved rounds:

- **call**: the compiled model's call (Dynamo's frame, guards, the baked-weights check, the runner);
- **guards**: Dynamo's guard check of the frame alone (its cache entry's guard manager on the call's locals);
- **runner**: the runner called directly with the arguments of its capture (no Dynamo frame);
- **pointer check**, **input copy**, **replay**, **output copies**: the runner's four steps alone;
- **floor replay** and **floor replay, keep_graph**: the bare replay of the floor's graph, both captures.

So call - runner is Dynamo's frame and what wraps the runner; runner - (its steps) is the runner's own Python.
A cProfile of each variant's calls follows the table (own time: the guard check is counted in the function that
calls the compiled ``forward``).
"""
from __future__ import annotations

import argparse
import cProfile
import io
import os
import platform
import pstats
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def _runner_steps(runner, args):
    import torch
    g = next(v for v in runner._graphs.values() if v.__class__.__name__ == "_Captured")
    copied = [args[i] for i in runner._copied]
    arglist = list(args)
    steps = {"runner": lambda: runner(*args),
             "pointer check": lambda: torch._C._tensors_data_ptrs_at_indices_equal(arglist, g.static_ptrs,
                                                                                    runner._checked),
             "input copy": lambda: torch._foreach_copy_(g.inputs, copied),
             "replay": g.graph.replay,
             "output copies": g.copy_out}
    return steps, len(runner._checked), len(runner._copied)


def _guard_check(model, x):
    """Dynamo's guard check of the compiled ``forward`` frame alone (the newest cache entry), or None."""
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list
    entries = _debug_get_cache_entry_list(type(model).forward.__code__)
    if not entries:
        return None
    manager, frame_locals = entries[0].guard_manager, {"self": model, "x": x}
    if not manager.check(frame_locals):
        return None
    return lambda: manager.check(frame_locals)


def _profile(fn, calls: int) -> str:
    import torch
    prof = cProfile.Profile()
    torch.cuda.synchronize()
    prof.enable()
    for _ in range(calls):
        fn()
    prof.disable()
    torch.cuda.synchronize()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(14)
    return out.getvalue().split("ncalls", 1)[-1]


def _time(fns: dict, rounds: int, calls: int) -> dict:
    import torch
    out = {k: [] for k in fns}
    for _ in range(rounds):
        for k, f in fns.items():
            for _ in range(calls // rounds):
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                f()
                out[k].append(time.perf_counter() - t0)
    torch.cuda.synchronize()
    return {k: statistics.median(v) * 1e3 for k, v in out.items()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="efficientnet_b0")
    ap.add_argument("--dtype", default="fp16", choices=("fp16", "fp32"))
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--cprofile-calls", type=int, default=500)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    import torch
    import hybrid_trt
    from hybrid_trt import backend
    from benchmarks import bench_cudagraphs as bcg
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    dtype = torch.float16 if args.dtype == "fp16" else torch.float32
    made = []

    class Recorded(backend.WholeGraph):  # the slow path keeps the capture call's arguments; replays are untouched
        def _uncaptured_or_capture(self, key, call_args, g):
            self.capture_args = call_args
            made.append(self)
            return super()._uncaptured_or_capture(key, call_args, g)
    backend.WholeGraph = Recorded
    torch._logging.set_logs(recompiles=True)  # a recompile's reason goes to the log
    lines = [f"Machine: {torch.cuda.get_device_name()}, {os.cpu_count()} CPU cores, Python "
             f"{platform.python_version()}, torch {torch.__version__}; `{' '.join(sys.argv)}`", ""]
    for name in args.models.split(","):
        model, x = bcg._model(name, dtype, args.batch)
        fns, info, profiles = {}, {}, {}
        with torch.inference_mode():
            for label, v in (("whole", "hybrid_cg_mp_whole"), ("whole recipe", "hybrid_cg_mp_whole_recipe")):
                torch._dynamo.reset()
                made.clear()
                frames = torch._dynamo.utils.counters["stats"]["unique_graphs"]
                fn = bcg._compiled(v, model)
                for _ in range(4):
                    fn(x)
                fn = getattr(fn, "compiled", fn)
                # The runner the latest frame calls: a recompile after the first call (outside the recipe's
                # patch) would serve the calls from a second frame and runner (session 26's H100 reading).
                captured = [r for r in dict.fromkeys(made) if any(g.__class__.__name__ == "_Captured"
                                                                  for g in r._graphs.values())]
                runner = captured[-1] if captured else None
                frames = torch._dynamo.utils.counters["stats"]["unique_graphs"] - frames
                status = hybrid_trt.last_report().cuda_graphs.status
                if runner is None:
                    lines.append(f"- {name} {label}: no captured runner ({status}); skipped")
                    continue
                fns[f"{label}: call"] = (lambda f: lambda: f(x))(fn)
                guards = _guard_check(model, x)
                if guards is not None:
                    fns[f"{label}: guards"] = guards
                profiles[label] = _profile(fns[f"{label}: call"], args.cprofile_calls)
                steps, n_checked, n_copied = _runner_steps(runner, runner.capture_args)
                fns.update({f"{label}: {k}": s for k, s in steps.items()})
                info[label] = (f"{len(runner.capture_args)} frame arguments, {n_checked} pointer-checked, "
                               f"{n_copied} copied in; {frames} frame(s) compiled, {len(captured)} runner(s) "
                               f"captured (frame arguments {[len(r.capture_args) for r in captured]}); {status}")
                print(f"- {name} {label}: {info[label]}", flush=True)
            torch._dynamo.reset()
            floor = bcg.floor_capture(model, x, keep_graph=False)[0]
            floor_keep = bcg.floor_capture(model, x, keep_graph=True)[0]
            floor.replay()
            floor_keep.replay()
            fns["floor replay"] = floor.replay
            fns["floor replay, keep_graph"] = floor_keep.replay
            times = _time(fns, args.rounds, args.calls)
        lines += [f"## {name} {args.dtype} batch {args.batch}", ""]
        lines += [f"- {k}: {v}" for k, v in info.items()] + [""]
        lines += ["| layer | host ms (median) |", "|---|---|"]
        lines += [f"| {k} | {v:.4f} |" for k, v in times.items()] + [""]
        print("\n".join(lines[-len(times) - len(info) - 6:]), flush=True)
        for label, text in profiles.items():
            lines += [f"### {name} {label}: cProfile of {args.cprofile_calls} calls, by own time", "", "```",
                      "ncalls" + text.rstrip(), "```", ""]
    text = "\n".join(lines) + "\n"
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    print(text)


if __name__ == "__main__":
    main()
