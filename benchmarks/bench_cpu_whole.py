"""Fully delegated models on the CPU: hybrid_trt against ONNX Runtime on the whole model, in one process, in
paired alternating rounds, with the per-call layers between the two (issue 10's CPU target: within 1.05x).

    python benchmarks/bench_cpu_whole.py [--models resnet18,resnet50,mobilenet_v3_large,efficientnet_b0]
                                         [--threads 2] [--rounds 200] [--out FILE]

Every model is batch 1, 224x224, float32, random weights (torchvision), compiled with
``options={"num_threads": --threads}``. Each callable below runs once per round, in an order shuffled every round;
a figure is the median over rounds, a layer the median of its per-round paired differences, a ratio the median of
the per-round ratios (drift of a shared machine cancels in all three). Layers are given twice: wall time, and the
CPU time of the calling thread (``time.thread_time``), which leaves out the time the thread was preempted by other
processes; every layer above the session is Python and C++ in the calling thread.

  hybrid <guards>  torch.compile(model, backend="hybrid_trt"), each compiled under one guard setting:
                   default; recursive_dict_tags (torch._dynamo.config.use_recursive_dict_tags_for_guards = True
                   while compiling); baked_filter (options={"guard_filter_fn":
                   hybrid_trt.skip_guards_on_baked_weights}); recipe (both, README "Per-call cost");
                   recipe_free_tensors (the recipe plus torch._dynamo.config.install_free_tensors = True:
                   weights become attributes of the captured graph instead of arguments of the frame)
  hybrid inductor  default guards, with the direct call switched off for this compile: Dynamo's frame calls
                   Inductor's compiled graph (AOTAutograd's wrapper, Inductor's code, the delegate op), as before
                   stitch/direct.py existed
  graph            the callable Dynamo's frame calls (the direct call), called with the frame's arguments
  graph inductor   Inductor's compiled graph, called the same way
  run              PartitionRuntime.run (what the direct call calls)
  engine           the partition's OnnxRuntimeEngine (IO binding of this call's tensors, outputs, run)
  engine public    the same engine through ONNX Runtime's public IOBinding wrappers (as before the CPU call was
                   prepared at construction)
  raw              the partition's session on pre-bound buffers (ONNX Runtime's work on hybrid_trt's lowering)
  ort              the whole model exported by torch.onnx (dynamo=True, optimize=True), in a session with
                   hybrid_trt's session options (intra-op threads = --threads, inter-op 1, workers spinning only
                   during a run, full graph optimisation), called with InferenceSession.run on a numpy view of the input
  ort raw          that session on pre-bound buffers (the exporter's graph)
  deployed         the model exported ahead of time (hybrid_trt.export, options={"num_threads": --threads}) and
                   loaded back (hybrid_trt.load): no Dynamo frame; the AOTInductor package calls the engine through
                   its proxy executor. Its session is the package's own (the same optimized model and settings,
                   loaded from the package), not the one the other hybrid callables share
  ort spin         the same whole model with ONNX Runtime's default spinning, timed in a second phase against
                   hybrid default, hybrid recipe and ort only, with 50 ms of sleep before each call: its workers
                   keep spinning after a run returns and took a core from whatever ran next (in one shared cycle
                   of rounds, the callable after it came out 1.5x slower). The sleep also makes this phase what
                   a loop that waits between calls sees (a 20 fps camera): caches cold at every call
  frame <guards>   Dynamo's frame alone: a backend that returns a constant, compiled under default guards,
                   recursive dict tags, install_free_tensors (parameters become graph attributes, not
                   arguments: the cost of passing them in), and no guards at all
                   (torch.compiler.skip_all_guards_unsafe: the floor of any guard setting, unsafe)

The 1.05x target is judged on hybrid / ort (same threads, same spinning); hybrid / ort spin is printed beside it.
Only models that are fully delegated (one partition, every op in it, nothing left to Inductor) are timed. Every
compile of a model loads its own ONNX Runtime session (same engine, from the store); after compiling, every
variant is pointed at the first compile's engine, so all callables run the very same session and differences
between them are the layers, not the sessions.
Each compiled copy of a model gets a ``forward`` code object of its own (``_own_code``): Dynamo keeps compiled
frames per code object, and copies sharing one could be served by each other's frame.
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

MODELS = ("resnet18", "resnet50", "mobilenet_v3_large", "efficientnet_b0")
GUARDS = ("default", "recursive_dict_tags", "baked_filter", "recipe", "recipe_free_tensors")
FRAMES = ("default", "recursive_dict_tags", "free_tensors", "no_guards")


def _guard_setting(name: str):
    """(Dynamo config patch while the frame is compiled and its guards built, extra torch.compile options)."""
    import torch
    import hybrid_trt
    rdt = {"use_recursive_dict_tags_for_guards": True}
    baked = {"guard_filter_fn": hybrid_trt.skip_guards_on_baked_weights}
    return {"default": ({}, {}), "recursive_dict_tags": (rdt, {}), "baked_filter": ({}, baked),
            "recipe": (rdt, baked), "no_guards": ({}, {"guard_filter_fn": torch.compiler.skip_all_guards_unsafe}),
            "recipe_free_tensors": ({**rdt, "install_free_tensors": True}, baked),
            # parameters installed as graph attributes instead of arguments: what passing them in costs the frame
            "free_tensors": ({"install_free_tensors": True}, {})}[name]


def _loadavg() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def _commit() -> str:
    try:
        head = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True).stdout.strip()
        return head + (" (working tree with uncommitted changes)" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "?"


def _own_code(model, tag: str):
    """``model`` as an instance of a subclass whose ``forward`` has a code object of its own (see module doc)."""
    import types
    base, f = type(model), type(model).forward
    forward = types.FunctionType(f.__code__.replace(), f.__globals__, f.__name__, f.__defaults__, f.__closure__)
    model.__class__ = type(f"{base.__name__}_{tag}", (base,), {"forward": forward})
    return model


@contextlib.contextmanager
def _no_direct_call():
    """hybrid_trt as it was before stitch/direct.py: the frame calls Inductor's compiled graph."""
    from hybrid_trt.stitch import direct
    saved = direct.direct_callable
    direct.direct_callable = lambda plan, runtimes: None
    try:
        yield
    finally:
        direct.direct_callable = saved


def _compile(model, x, guards: str, threads: int, *, frame_only: bool = False, direct: bool = True):
    """``model`` compiled (hybrid_trt, or a constant-returning backend with ``frame_only``) under ``guards``;
    returns (compiled model, the callable the frame calls, the frame's arguments, the report). The recording
    backend hands hybrid_trt's callable back unchanged, so the call path is the one ``backend="hybrid_trt"``
    has."""
    import torch
    import hybrid_trt
    from hybrid_trt.backend import hybrid_trt_backend
    patch, extra = _guard_setting(guards)
    seen = {}

    def recorder(gm, example_inputs, **kwargs):
        if frame_only:
            compiled = lambda *args: torch.zeros(1)  # noqa: E731
        else:
            compiled = hybrid_trt_backend(gm, example_inputs, options={"num_threads": threads})
            seen["report"] = hybrid_trt.last_report()
        seen["graph"], seen["args"] = compiled, list(example_inputs)
        return compiled
    compiled = torch.compile(model, backend=recorder, options=dict(extra) or None)
    with torch._dynamo.config.patch(patch), (contextlib.nullcontext() if direct else _no_direct_call()):
        compiled(x)  # guards are built when the frame is compiled, at the first call
    return compiled, seen["graph"], seen["args"], seen.get("report")


def _ort_whole(model, x, threads: int, spinning: bool):
    import onnxruntime as ort
    import tempfile
    import torch
    from hybrid_trt.delegates.onnxruntime_delegate import _session_options
    path = os.path.join(tempfile.mkdtemp(prefix="bench_cpu_whole_"), "model.onnx")
    with torch.no_grad():
        torch.onnx.export(model, (x,), path, dynamo=True, optimize=True, verbose=False)
    so = _session_options(threads)
    if spinning:  # ONNX Runtime's defaults: workers spin during a run and go on spinning after it returns
        so.add_session_config_entry("session.intra_op.allow_spinning", "1")
        so.add_session_config_entry("session.inter_op.allow_spinning", "1")
        so.add_session_config_entry("session.force_spinning_stop", "0")
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def _deployed(model, x, threads: int):
    """``model`` exported ahead of time and loaded back, as on a deployment target (docs/export.md)."""
    import tempfile
    import hybrid_trt
    path = os.path.join(tempfile.mkdtemp(prefix="bench_cpu_whole_pkg_"), "model.pkg")
    hybrid_trt.export(model, (x,), path=path, options={"num_threads": threads})
    return hybrid_trt.load(path)


def _settings(session) -> str:
    so = session.get_session_options()
    entry = so.get_session_config_entry
    return (f"intra {so.intra_op_num_threads}, inter {so.inter_op_num_threads}, spinning "
            f"{entry('session.intra_op.allow_spinning')}, stopped when a run returns "
            f"{entry('session.force_spinning_stop')}")


def _bind(session):
    """An IO binding of ``session`` on buffers of its own (returned, to be kept alive)."""
    import torch
    from hybrid_trt.delegates.onnxruntime_delegate import _NUMPY, _torch_dtype
    binding, held = session.io_binding(), []
    for info in session.get_inputs():
        t = torch.randn([int(d) for d in info.shape]).to(_torch_dtype(info.type))
        binding.bind_input(info.name, "cpu", 0, _NUMPY[t.dtype], list(t.shape), t.data_ptr())
        held.append(t)
    for info in session.get_outputs():
        t = torch.empty([int(d) for d in info.shape], dtype=_torch_dtype(info.type))
        binding.bind_output(info.name, "cpu", 0, _NUMPY[t.dtype], list(t.shape), t.data_ptr())
        held.append(t)
    return binding, held


def _delegation(report) -> tuple[bool, str]:
    total = report.total_op_count
    text = f"{len(report.partitions)} partition, {report.delegated_op_count}/{total} ops"
    ok = (report.whole_graph_reason is None and len(report.partitions) == 1 and not report.inductor_ops
          and report.partitions[0].status == "delegated")
    return ok, text


def _paired(fns: dict, rounds: int, settle: float = 0.0):
    """Each callable once per round, in an order shuffled every round (``settle`` seconds of sleep before each
    call); (wall, thread CPU) seconds by name. Shuffled, not rotated: a rotation keeps every callable behind the
    same predecessor, and in one run the callable behind the whole-model session came out up to 1.5x slower."""
    import random
    order = random.Random(0)
    names = list(fns)
    wall, cpu = {k: [] for k in names}, {k: [] for k in names}
    for _ in range(5):
        for fn in fns.values():
            fn()
    for _ in range(rounds):
        for k in order.sample(names, len(names)):
            fn = fns[k]
            if settle:
                time.sleep(settle)
            c0, t0 = time.thread_time(), time.perf_counter()
            fn()
            t1, c1 = time.perf_counter(), time.thread_time()
            wall[k].append(t1 - t0)
            cpu[k].append(c1 - c0)
    return wall, cpu


def _ms(samples) -> float:
    return statistics.median(samples) * 1e3


def run_model(name: str, threads: int, rounds: int) -> dict:
    import torch
    import bench_models
    from hybrid_trt.engines.runtime import REGISTRY
    from hybrid_trt.delegates.onnxruntime_delegate import OnnxRuntimeEngine
    out = {"name": name}
    model, x = bench_models._build(name)
    torch._dynamo.reset()
    hybrid, reports, graphs = {}, {}, {}
    for g in GUARDS:
        hybrid[g], graphs[g], a, reports[g] = _compile(_own_code(copy.deepcopy(model), f"h_{g}"), x, g, threads)
        if g == "default":
            direct_graph, args = graphs[g], a
    hybrid["inductor"], inductor_graph, _, reports["inductor"] = _compile(
        _own_code(copy.deepcopy(model), "h_inductor"), x, "default", threads, direct=False)
    graphs["inductor"] = inductor_graph
    frames = {g: _compile(_own_code(copy.deepcopy(model), f"f_{g}"), x, g, threads, frame_only=True)[0]
              for g in FRAMES}
    report = reports["default"]
    out["fully_delegated"], out["delegation"] = _delegation(report)
    from torch._dynamo.eval_frame import innermost_fn
    runtime = innermost_fn(direct_graph)._hybrid_trt_runtimes[0]
    for g in list(GUARDS) + ["inductor"]:  # one session for all (see the module doc)
        for rt in getattr(innermost_fn(graphs[g]), "_hybrid_trt_runtimes", ()):
            rt._static_engine = runtime._static_engine
    REGISTRY.live[runtime.key] = runtime  # what Inductor's graph (the delegate op) resolves
    out["per_call"] = {g: r.per_call for g, r in reports.items()}
    out["graph_inputs"] = len(args)
    eager = model(x)
    out["max_err"] = max(float((h(x) - eager).abs().max()) for h in hybrid.values())
    if not out["fully_delegated"]:
        return out
    engine = runtime._static_engine
    public = OnnxRuntimeEngine(engine._session, [torch.empty(eager.shape)], torch.device("cpu"))
    public._cpu_call = None
    session = engine._session
    binding, _held = _bind(session)
    whole = _ort_whole(model, x, threads, spinning=False)
    whole_spin = _ort_whole(model, x, threads, spinning=True)
    whole_binding, _held2 = _bind(whole)
    deployed = _deployed(model, x, threads)
    out["deployed_err"] = float((deployed(x) - eager).abs().max())
    in_name = whole.get_inputs()[0].name
    out["settings"] = {"hybrid_trt's session": _settings(session), "ORT whole": _settings(whole),
                       "ORT whole spinning": _settings(whole_spin)}
    out["ort_err"] = float((torch.from_numpy(whole.run(None, {in_name: x.numpy()})[0]) - eager).abs().max())
    fns = {f"hybrid {g}": (lambda f: lambda: f(x))(h) for g, h in hybrid.items()}
    fns.update({f"frame {g}": (lambda f: lambda: f(x))(f) for g, f in frames.items()})
    fns.update({
        "graph": lambda: direct_graph(*args),
        "graph inductor": lambda: inductor_graph(*args),
        "run": lambda: runtime.run([x], ()),
        "engine": lambda: engine([x]),
        "engine public": lambda: public([x]),
        "raw": lambda: session.run_with_iobinding(binding),
        "ort": lambda: whole.run(None, {in_name: x.numpy()}),
        "ort raw": lambda: whole.run_with_iobinding(whole_binding),
        "deployed": lambda: deployed(x),
    })
    out["load_before"] = _loadavg()
    with torch.no_grad():
        wall, cpu = _paired(fns, rounds)
        spin = {"hybrid default": fns["hybrid default"], "hybrid recipe": fns["hybrid recipe"], "ort": fns["ort"],
                "deployed": fns["deployed"],
                "ort spin": lambda: whole_spin.run(None, {in_name: x.numpy()})}
        out["spin"] = _paired(spin, max(rounds // 4, 10), settle=0.05)[0]
    out["load_after"] = _loadavg()
    out["wall"], out["cpu"] = wall, cpu
    return out


def _diff(ts, a, b) -> float:
    return _ms([p - q for p, q in zip(ts[a], ts[b])])


def _ratio(ts, a, b) -> float:
    return statistics.median(p / q for p, q in zip(ts[a], ts[b]))


def tables(results: list, threads: int, rounds: int) -> list:
    import bench_models
    bench_models.THREADS = threads
    timed = [r for r in results if r["fully_delegated"]]
    lines = [f"Machine: {bench_models.machine()}; commit {_commit()}; {rounds} paired rounds per model", "",
             "### hybrid_trt against ONNX Runtime on the whole model (median ms; ratio: median of per-round ratios)",
             "",
             "| model | fully delegated | per call | graph inputs | ORT whole | hybrid default | **hybrid / ORT "
             "whole** | hybrid recipe | **recipe / ORT whole** | hybrid recipe + free tensors | recipe + free tensors "
             "/ ORT whole | deployed (hybrid_trt.load) | **deployed / ORT whole** | 2nd phase (50 ms idle before each "
             "call): hybrid default, hybrid recipe, deployed, ORT whole, ORT whole spinning | 2nd phase: hybrid / ORT "
             "whole, recipe / ORT whole, deployed / ORT whole, hybrid / ORT spinning | max abs err hybrid, deployed, "
             "ORT | load avg before -> after |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        if not r["fully_delegated"]:
            lines.append(f"| {r['name']} | no: {r['delegation']} | {r['per_call']['default']} | "
                         f"{r['graph_inputs']} | not timed | | | | | | | | | | | {r['max_err']:.1e} | |")
            continue
        w, sp = r["wall"], r["spin"]
        m = {k: _ms(v) for k, v in w.items()}
        lines.append(
            f"| {r['name']} | yes: {r['delegation']} | {r['per_call']['default']} | {r['graph_inputs']} | "
            f"{m['ort']:.3f} | {m['hybrid default']:.3f} | **{_ratio(w, 'hybrid default', 'ort'):.3f}** | "
            f"{m['hybrid recipe']:.3f} | **{_ratio(w, 'hybrid recipe', 'ort'):.3f}** | "
            f"{m['hybrid recipe_free_tensors']:.3f} | {_ratio(w, 'hybrid recipe_free_tensors', 'ort'):.3f} | "
            f"{m['deployed']:.3f} | **{_ratio(w, 'deployed', 'ort'):.3f}** | "
            f"{_ms(sp['hybrid default']):.3f}, {_ms(sp['hybrid recipe']):.3f}, {_ms(sp['deployed']):.3f}, "
            f"{_ms(sp['ort']):.3f}, {_ms(sp['ort spin']):.3f} | {_ratio(sp, 'hybrid default', 'ort'):.3f}, "
            f"{_ratio(sp, 'hybrid recipe', 'ort'):.3f}, {_ratio(sp, 'deployed', 'ort'):.3f}, "
            f"{_ratio(sp, 'hybrid default', 'ort spin'):.3f} | "
            f"{r['max_err']:.1e}, {r['deployed_err']:.1e}, {r['ort_err']:.1e} | {r['load_before']} -> "
            f"{r['load_after']} |")
    layers = [("Dynamo frame, default guards", "hybrid default", "graph"),
              ("direct call", "graph", "run"),
              ("(before: Inductor's compiled graph)", "graph inductor", "run"),
              ("PartitionRuntime.run", "run", "engine"),
              ("engine: binding + outputs", "engine", "raw"),
              ("(before: public IOBinding)", "engine public", "raw")]
    for kind in ("wall", "cpu"):
        what = "wall time" if kind == "wall" else "CPU time of the calling thread"
        lines += ["", f"### Layers, {what} (ms; median of per-round differences)", "",
                  "| model | " + " | ".join(n for n, _, _ in layers)
                  + " | session (raw) | raw - ORT whole raw (hybrid's lowering vs the exporter's) | "
                  "ORT whole: run API (ort - ort raw) | hybrid - ORT whole |",
                  "|---|" + "---|" * (len(layers) + 4)]
        for r in timed:
            ts = r[kind]
            lines.append(f"| {r['name']} | " + " | ".join(f"{_diff(ts, a, b):.3f}" for _, a, b in layers)
                         + f" | {_ms(ts['raw']):.3f} | {_diff(ts, 'raw', 'ort raw'):.3f} | "
                         f"{_diff(ts, 'ort', 'ort raw'):.3f} | {_diff(ts, 'hybrid default', 'ort'):.3f} |")
    lines += ["", "### Before and after, and Dynamo's guard settings (same rounds; ms)", "",
              "| model | hybrid before (Inductor's graph) | hybrid default | " + " | ".join(
                  f"hybrid {g}" for g in GUARDS[1:]) + " | "
              + " | ".join(f"{g} - default (wall / CPU)" for g in ("inductor",) + GUARDS[1:]) + " | "
              + " | ".join(f"frame alone {g} (wall / CPU)" for g in FRAMES) + " |",
              "|---|---|---|" + "---|" * (len(GUARDS) - 1 + len(GUARDS) + len(FRAMES))]
    for r in timed:
        w, c = r["wall"], r["cpu"]
        lines.append(
            f"| {r['name']} | {_ms(w['hybrid inductor']):.3f} | {_ms(w['hybrid default']):.3f} | "
            + " | ".join(f"{_ms(w[f'hybrid {g}']):.3f}" for g in GUARDS[1:]) + " | "
            + " | ".join(f"{_diff(w, f'hybrid {g}', 'hybrid default'):+.3f} / "
                         f"{_diff(c, f'hybrid {g}', 'hybrid default'):+.3f}" for g in ("inductor",) + GUARDS[1:])
            + " | " + " | ".join(f"{_ms(w[f'frame {g}']):.3f} / {_ms(c[f'frame {g}']):.3f}" for g in FRAMES)
            + " |")
    settings = next((r["settings"] for r in timed), None)
    if settings:
        lines += ["", "Sessions: " + "; ".join(f"{k}: {v}" for k, v in settings.items())]
    return lines


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--out")
    args = ap.parse_args()
    import torch
    torch.set_num_threads(args.threads)
    results = []
    with torch.no_grad():
        for name in args.models.split(","):
            results.append(run_model(name, args.threads, args.rounds))
            print("\n".join(tables(results[-1:], args.threads, args.rounds)[2:]), flush=True)
    text = "\n".join(tables(results, args.threads, args.rounds)) + "\n"
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
