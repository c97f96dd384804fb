"""Compile time, cold and warm: each measurement is a fresh process.

- cold: empty cache directories (Inductor's TORCHINDUCTOR_CACHE_DIR and hybrid_trt's cache_dir);
- warm: a second process with the same directories (a restarted service, a rerun notebook).

Inside each process: "compile" is from ``torch.compile(...)`` to the first output returned (Dynamo tracing,
partitioning, lowering, engine builds or loads, Inductor or its caches, first run); "process" is from launching
the interpreter to that first output (imports included). Then the per-call latency of the compiled model (median
of timed calls), which must not change between a cold and a warm process: keys are resolved at compile time, a
call costs one dict lookup per delegated partition.

The warm compile is split by Dynamo's own timers into what a warm start cannot skip and what the backend does:
"dynamo" is Dynamo's frame compiles less the backend (tracing, guards), "backend" the time inside the backend
(for a cache hit: graph key, engine loads, Inductor's AOTAutograd cache key and lookup), "rest" the remainder
(the first run, frames Dynamo skips). A Dynamo-only reference (backend "eager", nothing to cache) and the time a
fresh process spends hashing torch's and Triton's sources for Inductor's cache key are measured beside them.
hybrid_trt has torch compute those hashes in its worker thread while the backend computes its graph key and loads
engines (``engines/graph.py``, ``source_hashes_in_background``), so on a machine with a free core they overlap.

Each cold/warm pair runs in its own cache directories, ``--repeats`` times; every row gives the 1-minute load
average at the start of its cold and warm process (the machine is shared: compare ratios within a row).
``BENCH_TREE=DIR`` makes the children import hybrid_trt and the examples from DIR (a snapshot of a commit, while
the working tree changes); ``--trees A,B`` compares two trees' warm starts.

    .venv/bin/python benchmarks/bench_compile_time.py [--models resnet18,detector,lidar] [--repeats 1]
        [--backends hybrid_trt,inductor]
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]


def child(name: str, backend: str, iters: int) -> None:
    t_start = time.perf_counter()
    load_avg = os.getloadavg()[0]  # other sessions' load when this process started
    import torch
    sys.path.insert(0, os.environ.get("BENCH_TREE", str(ROOT)))  # --trees: hybrid_trt and examples from there
    import hybrid_trt
    threads = int(os.environ.get("BENCH_THREADS", "2"))
    torch.set_num_threads(threads)
    torch.manual_seed(0)  # the same weights in every process (some example layers use the global generator)
    compile_kwargs = {}
    if name == "lidar":
        from examples.lidar_detector import build_model, make_inputs
        model, inputs = build_model("small").eval(), make_inputs("small")
        torch._dynamo.config.capture_dynamic_output_shape_ops = True  # strided sparse convs
        compile_kwargs["fullgraph"] = True
    else:
        from examples.models import build
        model, x = build(name)
        inputs = (x,)
    hash_waits = _time_source_hash_waits()
    with torch.no_grad():
        expected = model(*inputs)
        t0 = time.perf_counter()
        compiled = torch.compile(model, backend=backend, **compile_kwargs)
        out = compiled(*inputs)
        t1 = time.perf_counter()
        # Dynamo's own timers up to the first output: frame compiles (tracing, backend, guards), backend calls
        from torch._dynamo.utils import compilation_time_metrics as timers
        frames_s = sum(timers.get("_compile.compile_inner", []))
        backend_s = sum(timers.get("OutputGraph.call_user_compiler", []))
        graphs = len(timers.get("OutputGraph.call_user_compiler", []))
        times = []
        for _ in range(iters):
            s = time.perf_counter()
            compiled(*inputs)
            times.append(time.perf_counter() - s)
    flat = lambda o: list(o) if isinstance(o, (tuple, list)) else [o]  # noqa: E731
    ok = all(torch.allclose(a.float(), b.float(), rtol=1e-3, atol=1e-3) for a, b in zip(flat(out), flat(expected)))
    result = {"compile_s": t1 - t0, "import_to_output_s": t1 - t_start, "call_ms": 1e3 * statistics.median(times),
              "load_avg": load_avg, "hash_wait_s": sum(hash_waits),
              "matches": ok, "wall_end": time.time(), "trace_s": frames_s - backend_s,
              "backend_s": backend_s, "rest_s": t1 - t0 - frames_s,
              "graphs": graphs}
    if backend == "hybrid_trt":
        reports = hybrid_trt.reports()
        engines = [e for r in reports for p in r.partitions for e in p.engines]
        result.update(built=sum(e.source == "built" for e in engines), loaded=sum(e.source == "loaded" for e in engines),
                      engine_s=sum(e.seconds for e in engines),
                      from_inductor_cache=all(r.from_inductor_cache for r in reports),
                      direct_from_manifest=all(getattr(r, "from_graph_manifest", False) and r.per_call == "direct"
                                               for r in reports))
    print("RESULT " + json.dumps(result))


def _time_source_hash_waits() -> list:
    """Time the main thread spends in Inductor's source-hash functions (``codecache.torch_key``/``triton_key``):
    the whole hash where it is computed at the cache lookup, only the wait where it was prefetched. Measurement
    only: each is wrapped with its ``prefetch``/``set``/``clear`` kept, so the backend still finds ``prefetch``."""
    from torch._inductor import codecache
    waits: list = []
    for name in ("torch_key", "triton_key"):
        original = getattr(codecache, name, None)
        if original is None:
            continue

        def timed(original=original):
            start = time.perf_counter()
            try:
                return original()
            finally:
                waits.append(time.perf_counter() - start)
        for attr in ("prefetch", "set", "clear"):
            if hasattr(original, attr):
                setattr(timed, attr, getattr(original, attr))
        setattr(codecache, name, timed)
    return waits


def source_hash_seconds() -> float:
    """Inductor's cache key includes hashes of torch's and Triton's sources, computed once per process: a fresh
    process's cost of that, on its own."""
    code = ("import time, torch\nfrom torch._inductor import codecache\nt = time.perf_counter()\n"
            "codecache.torch_key()\ncodecache.triton_key()\nprint(time.perf_counter() - t)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, check=True)
    return float(proc.stdout.strip().splitlines()[-1])


def run(name: str, backend: str, dirs: pathlib.Path, iters: int, threads: int, tree: str | None = None) -> dict:
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(dirs / "inductor"), HYBRID_TRT_CACHE_DIR=str(dirs / "hybrid"),
               BENCH_THREADS=str(threads), OMP_NUM_THREADS=str(threads))
    if tree:
        env["BENCH_TREE"] = tree
    launch = time.time()
    proc = subprocess.run([sys.executable, __file__, "--child", name, backend, str(iters)], env=env,
                          capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0:
        raise RuntimeError(f"{name} {backend} failed:\n{proc.stderr[-4000:]}")
    line = next(line for line in proc.stdout.splitlines() if line.startswith("RESULT "))
    result = json.loads(line[len("RESULT "):])
    result["process_s"] = result.pop("wall_end") - launch
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", default="resnet18,detector,lidar")
    parser.add_argument("--backends", default="hybrid_trt,inductor")
    parser.add_argument("--repeats", type=int, default=1, help="cold/warm pairs per model and backend")
    parser.add_argument("--iters", type=int, default=30)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--trees", default=None,
                        help="A,B: warm starts of two source trees (e.g. a `git archive` of an older commit and .), "
                             "alternating on one cache filled by a cold process of A; hybrid_trt only")
    parser.add_argument("--child", nargs=3)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], args.child[1], int(args.child[2]))
        return
    if args.trees:
        compare_trees(args)
        return
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from bench_models import machine
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    tree = os.environ.get("BENCH_TREE")  # children import hybrid_trt from there (e.g. a `git archive` snapshot)
    print(f"Machine: {machine()}; commit {commit}" + (f" (code from {tree})" if tree else "")
          + f"; {args.threads} threads\n")
    print("| model | backend | cold compile s | warm compile s | warm/cold | cold process s | warm process s | "
          "engines cold -> warm | Inductor graph warm | call ms cold | call ms warm | matches | load cold/warm |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    breakdown = []
    ratios: dict = {}
    for name in args.models.split(","):
        for backend in args.backends.split(","):
            for _ in range(args.repeats):
                with tempfile.TemporaryDirectory(prefix="bench_compile_") as tmp:
                    iters = args.iters if name != "lidar" else max(3, args.iters // 6)  # ~2 s per call on CPU
                    cold = run(name, backend, pathlib.Path(tmp), iters, args.threads)
                    warm = run(name, backend, pathlib.Path(tmp), iters, args.threads)
                breakdown.append((name, backend, cold, warm))
                ratios.setdefault((name, backend), []).append(warm["compile_s"] / cold["compile_s"])
                engines = (f"built {cold['built']} -> loaded {warm['loaded']}, built {warm['built']}"
                           if backend == "hybrid_trt" else "-")
                cached = ("not needed (direct call)" if warm.get("direct_from_manifest") else
                          "from cache" if warm.get("from_inductor_cache") else "compiled") \
                    if backend == "hybrid_trt" else "-"
                print(f"| {name} | {backend} | {cold['compile_s']:.2f} | {warm['compile_s']:.2f} | "
                      f"{warm['compile_s'] / cold['compile_s']:.0%} | {cold['process_s']:.2f} | "
                      f"{warm['process_s']:.2f} | {engines} | {cached} | {cold['call_ms']:.2f} | "
                      f"{warm['call_ms']:.2f} | "
                      f"{cold['matches'] and warm['matches']} | {cold['load_avg']:.1f} / {warm['load_avg']:.1f} |",
                      flush=True)
        with tempfile.TemporaryDirectory(prefix="bench_compile_") as tmp:
            iters = 1  # Dynamo alone: nothing is cached, so one process tells cold and warm
            breakdown.append((name, "eager (Dynamo only)", None, run(name, "eager", pathlib.Path(tmp), iters,
                                                                     args.threads)))
    if args.repeats > 1:
        print("\nwarm/cold, median of the pairs above (min-max):\n")
        for (name, backend), rs in ratios.items():
            print(f"- {name} {backend}: {statistics.median(rs):.0%} ({min(rs):.0%}-{max(rs):.0%}, {len(rs)} pairs)")
    print("\nWarm compile split (s), Dynamo's timers: dynamo = frame compiles less the backend (tracing, guards), "
          "backend = inside the backend, rest = first run and the remainder; engines = engine loads (in backend); "
          "hash wait = main thread blocked on the source hashes of Inductor's cache key (in backend); "
          "Dynamo-only reference: backend \"eager\".\n")
    print("| model | backend | warm compile s | dynamo s | backend s | engines s | hash wait s | rest s | graphs | "
          "load |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, backend, _, warm in breakdown:
        engine_s = f"{warm['engine_s']:.2f}" if "engine_s" in warm else "-"
        print(f"| {name} | {backend} | {warm['compile_s']:.2f} | {warm['trace_s']:.2f} | {warm['backend_s']:.2f} | "
              f"{engine_s} | {warm['hash_wait_s']:.2f} | {warm['rest_s']:.2f} | {warm['graphs']} | "
              f"{warm['load_avg']:.1f} |", flush=True)
    print(f"\nHashing torch's and Triton's sources for Inductor's cache key, fresh process (load "
          f"{os.getloadavg()[0]:.1f}): {source_hash_seconds():.2f} s")


def compare_trees(args) -> None:
    """Warm starts of two source trees on the same cache, alternating A, B, A, B... (``--repeats`` each), so a
    change to the warm path is measured under the same machine load. Both trees must key graphs and engines the
    same way (else a warm process builds: the engines column says so)."""
    trees = [os.path.abspath(t) for t in args.trees.split(",")]
    print(f"Warm starts, trees A = {trees[0]}, B = {trees[1]}; {args.repeats} each, alternating\n")
    print("| model | tree | warm compile s | dynamo s | backend s | hash wait s | engines built/loaded | matches | "
          "load |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name in args.models.split(","):
        iters = 3
        with tempfile.TemporaryDirectory(prefix="bench_compile_") as tmp:
            run(name, "hybrid_trt", pathlib.Path(tmp), iters, args.threads, trees[0])  # cold: fills the caches
            rows: dict = {0: [], 1: []}
            for _ in range(args.repeats):
                for i, tree in enumerate(trees):
                    r = run(name, "hybrid_trt", pathlib.Path(tmp), iters, args.threads, tree)
                    rows[i].append(r)
                    print(f"| {name} | {'AB'[i]} | {r['compile_s']:.2f} | {r['trace_s']:.2f} | {r['backend_s']:.2f} | "
                          f"{r['hash_wait_s']:.2f} | {r['built']}/{r['loaded']} | {r['matches']} | "
                          f"{r['load_avg']:.1f} |", flush=True)
        for i in (0, 1):
            med = {k: statistics.median(r[k] for r in rows[i]) for k in ("compile_s", "backend_s", "hash_wait_s")}
            print(f"\n- {name} {'AB'[i]} median: warm compile {med['compile_s']:.2f} s, backend "
                  f"{med['backend_s']:.2f} s, hash wait {med['hash_wait_s']:.2f} s", end="")
        print()


if __name__ == "__main__":
    main()
