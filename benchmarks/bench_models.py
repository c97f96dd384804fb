"""Latency and cold-compile benchmark: eager vs Inductor (freezing) vs ONNX Runtime whole model vs hybrid_trt.

    .venv/bin/python benchmarks/bench_models.py [--models resnet18,detector,transformer] [--out FILE]
    .venv/bin/python benchmarks/bench_models.py --frame resnet18,detector,transformer [--out FILE]

``--models`` also takes torchvision classifier names (e.g. ``convnext_tiny``, random weights, 1x3x224x224).

Latency: all four callables live in one process and are timed in interleaved rounds, so a load change on the
machine hits every variant alike; the ratios are taken within that one run. Cold compile: each variant is
compiled in a fresh subprocess with Inductor's on-disk caches pointed at an empty directory.
Per-call cost hybrid adds: hybrid latency minus the time of the raw ONNX Runtime sessions it calls
(``run_with_iobinding`` on pre-bound buffers), divided by the number of partitions.

Multi-model frame (``--frame``): a perception process runs several models per frame. Each variant's models are
timed alone (one model called repeatedly) and together (all models back to back, one frame per sample), in
rounds that alternate the variants; per round the frame time is paired with the sum of the alone times, and the
table reports medians.

In both modes two more compiles of hybrid_trt differ only in their ONNX Runtime thread-pool settings, in the same
process, so the effect of the session options is measured in one run: ``hybrid_trt_spinning`` keeps ONNX
Runtime's defaults (workers spin during a run and for a while after it returns: the behaviour before issue 7),
``hybrid_trt_blocking`` never spins (the default from issue 7 until session 40). ``hybrid_trt`` is the default:
workers spin during a run and stop the moment it returns (``session.force_spinning_stop``).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

THREADS = 2
VARIANTS = ("eager", "inductor_freezing", "onnxruntime_whole", "hybrid_trt")
TIMED_VARIANTS = VARIANTS + ("hybrid_trt_spinning", "hybrid_trt_blocking")
# ONNX Runtime session settings of the two comparison compiles (hybrid_trt uses the delegate's THREAD_POOL_CONFIG).
THREAD_POOLS = {"hybrid_trt_spinning": {},
                "hybrid_trt_blocking": {"session.intra_op.allow_spinning": "0", "session.inter_op.allow_spinning": "0"}}
# An option each comparison compile sets that changes nothing on the CPU but is part of the engine key: without it,
# its partitions would share hybrid_trt's engines (one runtime per content key in a process).
DISTINCT_KEY = {"hybrid_trt_spinning": {"onnxruntime_provider": "cpu"},
                "hybrid_trt_blocking": {"onnxruntime_cuda_layout": "nchw"}}


def _make(variant: str, name: str):
    """Returns (callable, model, x). Compilation happens on the first call."""
    import torch
    torch.set_num_threads(THREADS)
    model, x = _build(name)
    if variant == "eager":
        return model, model, x
    if variant == "inductor_freezing":
        return torch.compile(model, backend="inductor", options={"freezing": True}), model, x
    import hybrid_trt  # noqa: F401  (registers the backend)
    if variant == "hybrid_trt":
        return torch.compile(model, backend="hybrid_trt", options={"num_threads": THREADS}), model, x
    if variant in THREAD_POOLS:
        fn = torch.compile(model, backend="hybrid_trt", options={"num_threads": THREADS, **DISTINCT_KEY[variant]})
        return _compiled_with_thread_pool(fn, THREAD_POOLS[variant]), model, x
    if variant == "onnxruntime_whole":
        return _ort_whole(model, x), model, x
    raise ValueError(variant)


def _build(name: str):
    """An example model of this repository, or a torchvision classifier by name (random weights)."""
    from examples.models import EXAMPLES, build
    if name in EXAMPLES:
        return build(name)
    import torch
    import torchvision
    torch.manual_seed(0)
    return torchvision.models.get_model(name, weights=None).eval(), torch.randn(1, 3, 224, 224)


def _compiled_with_thread_pool(fn, config: dict):
    """``fn`` whose engines (built at its first call) get ONNX Runtime session settings ``config`` instead of the
    delegate's own (``THREAD_POOL_CONFIG``)."""
    from hybrid_trt.delegates import onnxruntime_delegate as ortd
    state = {"built": False}

    def run(x):
        if state["built"]:
            return fn(x)
        saved = ortd.THREAD_POOL_CONFIG
        ortd.THREAD_POOL_CONFIG = config
        try:
            out = fn(x)
        finally:
            ortd.THREAD_POOL_CONFIG = saved
        state["built"] = True
        return out
    return run


def _ort_whole(model, x):
    import onnxruntime as ort
    import torch
    path = os.path.join(tempfile.mkdtemp(), "model.onnx")
    with torch.no_grad():
        torch.onnx.export(model, (x,), path, dynamo=True, optimize=True, verbose=False)
    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = THREADS, 1
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name

    def run(inp):
        outs = sess.run(None, {name: inp.numpy()})
        return tuple(torch.from_numpy(o) for o in outs) if len(outs) > 1 else torch.from_numpy(outs[0])
    return run


def cold_compile(variant: str, name: str) -> dict:
    """In a fresh subprocess: seconds from nothing to the first result (import excluded)."""
    code = f"""
import json, sys, time
sys.path.insert(0, {ROOT!r}); sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})
import torch, bench_models
t0 = time.perf_counter()
try:
    fn, model, x = bench_models._make({variant!r}, {name!r})
    with torch.no_grad():
        fn(x)
    print(json.dumps({{"seconds": time.perf_counter() - t0}}))
except Exception as e:
    print(json.dumps({{"error": type(e).__name__ + ": " + str(e)[:200]}}))
"""
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=tempfile.mkdtemp(prefix="bench-inductor-"),
               TORCHINDUCTOR_FX_GRAPH_CACHE="0", TORCHINDUCTOR_AUTOGRAD_CACHE="0")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    try:
        return json.loads(out.stdout.strip().splitlines()[-1])
    except Exception:
        return {"error": (out.stderr or out.stdout).strip().splitlines()[-1][:200] if (out.stderr or out.stdout) else "?"}


def _max_err(a, b) -> float:
    a = a if isinstance(a, (tuple, list)) else (a,)
    b = b if isinstance(b, (tuple, list)) else (b,)
    return max(float((x.double() - y.double()).abs().max()) for x, y in zip(a, b))


def latency(name: str, rounds: int, iters: int) -> dict:
    import torch
    from hybrid_trt.engines.runtime import REGISTRY
    _RUNTIMES = REGISTRY.live  # content key -> live partition runtime
    torch.set_num_threads(THREADS)
    fns, errors, results = {}, {}, {}
    with torch.no_grad():
        for v in TIMED_VARIANTS:
            before = set(_RUNTIMES.keys())
            try:
                fn, model, x = _make(v, name)
                out = fn(x)
                errors[v] = _max_err(out, model(x))
                fns[v] = fn
            except Exception as e:  # a variant that cannot run this model is reported, not hidden
                results[v] = {"error": f"{type(e).__name__}: {str(e)[:160]}"}
            if v == "hybrid_trt":
                hybrid_runtimes = [_RUNTIMES[h] for h in set(_RUNTIMES.keys()) - before]
        times = {v: [] for v in fns}
        for _ in range(3):  # warm-up
            for fn in fns.values():
                fn(x)
        for _ in range(rounds):
            for v, fn in fns.items():
                for _ in range(iters):
                    t0 = time.perf_counter()
                    fn(x)
                    times[v].append(time.perf_counter() - t0)
        raw = _raw_session_ms(hybrid_runtimes, rounds * iters) if "hybrid_trt" in fns else None
    for v in fns:
        results[v] = {"median_ms": statistics.median(times[v]) * 1e3, "max_abs_err_vs_eager": errors[v]}
    if raw is not None:
        results["hybrid_trt"]["raw_session_ms"] = raw["ms"]
        results["hybrid_trt"]["partitions"] = raw["partitions"]
    return results


def frame_latency(names: list, rounds: int, iters: int) -> dict:
    """Per variant: median ms of each model alone, of the frame (all models back to back), and the median over
    rounds of frame / sum of alone (paired within each round)."""
    import torch
    torch.set_num_threads(THREADS)
    fns, errors = {}, {}
    with torch.no_grad():
        for v in TIMED_VARIANTS:
            try:
                made = []
                for name in names:
                    fn, model, x = _make(v, name)
                    err = _max_err(fn(x), model(x))
                    made.append((fn, x))
                    errors[(v, name)] = err
                fns[v] = made
            except Exception as e:  # a variant that cannot run a model is reported, not hidden
                errors[(v, "error")] = f"{type(e).__name__}: {str(e)[:160]}"
        alone = {(v, i): [] for v in fns for i in range(len(names))}
        frame = {v: [] for v in fns}
        paired = {v: [] for v in fns}
        order = list(fns)
        for r in range(rounds):
            for v in order[r % len(order):] + order[:r % len(order)]:  # rotate who goes first
                time.sleep(0.05)  # let the previous variant's worker threads go idle
                round_alone = []
                for i, (fn, x) in enumerate(fns[v]):
                    fn(x)
                    samples = []
                    for _ in range(iters):
                        t0 = time.perf_counter()
                        fn(x)
                        samples.append(time.perf_counter() - t0)
                    alone[(v, i)] += samples
                    round_alone.append(statistics.median(samples))
                samples = []
                for _ in range(iters):
                    t0 = time.perf_counter()
                    for fn, x in fns[v]:
                        fn(x)
                    samples.append(time.perf_counter() - t0)
                frame[v] += samples
                paired[v].append(statistics.median(samples) / sum(round_alone))
    out = {"names": names, "errors": errors, "variants": {}}
    for v in fns:
        out["variants"][v] = {"alone_ms": [statistics.median(alone[(v, i)]) * 1e3 for i in range(len(names))],
                              "frame_ms": statistics.median(frame[v]) * 1e3,
                              "frame_over_alone": statistics.median(paired[v])}
    return out


def _frame_table(res: dict) -> list:
    names, vs = res["names"], res["variants"]
    ind = vs.get("inductor_freezing", {}).get("frame_ms")
    ort = vs.get("onnxruntime_whole", {}).get("frame_ms")
    rows = [f"### frame: {' + '.join(names)}", "",
            "| variant | " + " | ".join(f"{n} alone ms" for n in names) + " | sum alone ms | frame ms | "
            "frame / sum alone | frame vs Inductor | frame vs ORT whole | max abs err |",
            "|---|" + "---|" * (len(names) + 6)]
    for v, r in vs.items():
        errs = max(res["errors"][(v, n)] for n in names)
        rows.append(f"| {v} | " + " | ".join(f"{a:.2f}" for a in r["alone_ms"]) + f" | {sum(r['alone_ms']):.2f} | "
                    f"{r['frame_ms']:.2f} | {r['frame_over_alone']:.2f} | "
                    + (f"{r['frame_ms'] / ind:.2f}" if ind else "-") + " | "
                    + (f"{r['frame_ms'] / ort:.2f}" if ort else "-") + f" | {errs:.1e} |")
    for (v, n), e in res["errors"].items():
        if n == "error":
            rows.append(f"| {v} | {e} |" + " |" * (len(names) + 5))
    return rows + [""]


def _raw_session_ms(runtimes, n: int) -> dict:
    """Median time of the hybrid's ONNX Runtime sessions alone, run on pre-bound inputs and outputs."""
    total, parts = 0.0, 0
    for rt in runtimes:
        engine = getattr(rt._static_engine, "__self__", rt._static_engine)
        session = getattr(engine, "_session", None)
        if session is None:
            continue
        binding, held = _bind_fresh(engine)  # buffers held alive for the whole timing loop
        samples = []
        for _ in range(max(n // 2, 10)):
            t0 = time.perf_counter()
            session.run_with_iobinding(binding)
            samples.append(time.perf_counter() - t0)
        total += statistics.median(samples)
        parts += 1
    return {"ms": total * 1e3, "partitions": parts}


def _bind_fresh(engine):
    """A new IO binding of the engine's session with its own buffers (returned, to be kept alive)."""
    import torch
    from hybrid_trt.delegates.onnxruntime_delegate import _torch_dtype
    binding, held = engine._session.io_binding(), []
    for (name, _np), info in zip(engine._inputs, engine._session.get_inputs()):
        shape = list(info.shape)  # a static engine: every dim a number
        t = torch.randn(shape).to(_torch_dtype(info.type))
        binding.bind_input(name, "cpu", 0, _np, shape, t.data_ptr())
        held.append(t)
    for name, shape, dtype, np_dtype in engine._outputs:
        t = torch.empty(shape, dtype=dtype)
        binding.bind_output(name, "cpu", 0, np_dtype, shape, t.data_ptr())
        held.append(t)
    return binding, held


def machine() -> str:
    import onnxruntime
    import torch
    cpu = platform.processor() or "?"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return (f"{cpu}, {os.cpu_count()} logical cores, {platform.system()} {platform.machine()}, Python "
            f"{platform.python_version()}, torch {torch.__version__}, onnxruntime {onnxruntime.__version__}, "
            f"{THREADS} threads")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="resnet18,detector,transformer")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--skip-cold", action="store_true")
    ap.add_argument("--frame", default=None, help="comma-separated models run back to back per frame")
    ap.add_argument("--out", default=None, help="write the markdown table here too")
    args = ap.parse_args()
    lines = [f"Machine: {machine()}", ""]
    if args.frame:
        print(f"[bench] frame {args.frame} ...", file=sys.stderr, flush=True)
        lines += _frame_table(frame_latency(args.frame.split(","), args.rounds, args.iters))
    for name in ([] if args.frame else args.models.split(",")):
        print(f"[bench] {name}: latency ...", file=sys.stderr, flush=True)
        lat = latency(name, args.rounds, args.iters)
        cold = {}
        if not args.skip_cold:
            for v in VARIANTS:
                print(f"[bench] {name}: cold compile {v} ...", file=sys.stderr, flush=True)
                cold[v] = cold_compile(v, name)
        lines += _table(name, lat, cold)
    text = "\n".join(lines)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")


def _table(name, lat, cold) -> list:
    ort = lat.get("onnxruntime_whole", {}).get("median_ms")
    ind = lat.get("inductor_freezing", {}).get("median_ms")
    eag = lat.get("eager", {}).get("median_ms")
    ind_cold = cold.get("inductor_freezing", {}).get("seconds")
    rows = [f"### {name}", "",
            "| variant | median ms | vs eager | vs Inductor (freezing) | vs ORT whole | cold compile s | "
            "cold vs Inductor | max abs err |",
            "|---|---|---|---|---|---|---|---|"]
    for v in TIMED_VARIANTS:
        r = lat.get(v, {})
        if "median_ms" not in r:
            rows.append(f"| {v} | {r.get('error', 'n/a')} | | | | | | |")
            continue
        m = r["median_ms"]
        c = cold.get(v, {})
        cs = f"{c['seconds']:.1f}" if "seconds" in c else c.get("error", "-")
        cr = f"{c['seconds'] / ind_cold:.2f}" if "seconds" in c and ind_cold else "-"
        rows.append(f"| {v} | {m:.2f} | {m / eag:.2f} | {m / ind:.2f} | " + (f"{m / ort:.2f}" if ort else "-")
                    + f" | {cs} | {cr} | {r['max_abs_err_vs_eager']:.1e} |" if ind else
                    f"| {v} | {m:.2f} | {m / eag:.2f} | - | - | {cs} | {cr} | {r['max_abs_err_vs_eager']:.1e} |")
    h = lat.get("hybrid_trt", {})
    if "raw_session_ms" in h and h.get("partitions"):
        overhead = (h["median_ms"] - h["raw_session_ms"]) / h["partitions"]
        rows += ["", f"hybrid_trt: {h['partitions']} delegated partition(s); raw session time "
                 f"{h['raw_session_ms']:.2f} ms; added per-call cost {overhead:.3f} ms per partition."]
    return rows + [""]


if __name__ == "__main__":
    main()
