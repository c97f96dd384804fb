"""GPU diagnostic: where does a process with CUDA-graphed ONNX Runtime partitions abort at teardown?

Each variant runs in its own subprocess (an abort in one cannot hide the others), unbuffered, with its stderr
NOT captured by anything in between, so glibc's "double free" or C++'s "terminate called ..." lines show (pytest's
fd capture swallowed them in the original report). Steps are printed and flushed one by one; a summary line per
variant ends the run: ``OK``, or ``ABORT rc=<code>`` with the last step reached.

Variants:
- ``nodes``: the ORT engines of ResNet-18 (small) and the example detector, each captured once with
  ``torch.cuda.graph`` on a throwaway graph (never replayed): node types per engine. A host-function node
  (type 3) is what hybrid_trt/cudagraphs.py now refuses.
- ``raw_replay_graph_first`` / ``raw_replay_session_first``: the same captures, replayed 3 times, then the graph
  and the ORT session destroyed in either order. If the host-node explanation is right, the detector's engine
  aborts here (during a replay or at destruction) and ResNet-18's does not.
- ``raw_noreplay_session_first``: captured, never replayed, session destroyed before the graph: expected OK.
- ``compiled``: the test scenario with the current code: two models compiled with ``mode="reduce-overhead"``,
  alternating calls, then ``del``, ``gc``, ``torch._dynamo.reset()``. Expected OK.
- ``compiled_unguarded``: the same with the probe's replay check switched off (the code before the fix): expected
  to abort if the host-node explanation is right.
- ``compiled_reset_first``: ``torch._dynamo.reset()`` while both compiled models are alive, then ``del``.

Usage (GPU machine, repository root): ``python scripts/cudagraph_teardown_probe.py`` (all variants, in
parallel, < 3 minutes), or ``--variant NAME`` to run one in this process.
"""
from __future__ import annotations

import argparse
import gc
import os
import pathlib
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

VARIANTS = ("nodes", "raw_replay_graph_first", "raw_replay_session_first", "raw_noreplay_session_first",
            "compiled", "compiled_unguarded", "compiled_reset_first")
NODE_TYPES = {0: "kernel", 1: "memcpy", 2: "memset", 3: "HOST", 4: "child_graph", 5: "empty", 6: "wait_event",
              7: "event_record", 10: "mem_alloc", 11: "mem_free", 12: "batch_mem_op", 13: "conditional"}


def step(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] STEP {text}", flush=True)


# ---------------------------------------------------------------------------------------------- models


def models():
    import torch
    from examples.models import _randomize_bn, build, resnet18
    torch.manual_seed(0)
    resnet = _randomize_bn(resnet18(num_classes=10, width=8)).eval().cuda()
    detector, xd = build("detector")
    return [("resnet18", resnet, torch.randn(1, 3, 64, 64, device="cuda")),
            ("detector", detector.cuda(), xd.cuda())]


def ort_engines():
    """(name, engine, example inputs, compiled fn) for every static ORT engine of the two models, compiled by
    hybrid_trt without CUDA graphs (the engines' own first calls happen here, uncaptured)."""
    import torch
    from hybrid_trt.engines.runtime import PartitionRuntime
    seen: dict = {}
    original = PartitionRuntime.run

    def recording(self, inputs, sizes):
        seen.setdefault(self.key, (self, [t.clone() for t in inputs]))
        return original(self, inputs, sizes)
    PartitionRuntime.run = recording
    out = []
    try:
        for name, model, x in models():
            step(f"compile {name} (no CUDA graphs) and run once")
            compiled = torch.compile(model, backend="hybrid_trt")
            with torch.no_grad():
                compiled(x)
            torch.cuda.synchronize()
            for k, (rt, inputs) in list(seen.items()):
                if rt._static_engine is not None and type(rt._static_engine).__name__ == "OnnxRuntimeEngine":
                    out.append((f"{name}/{rt.name}", rt._static_engine, inputs, compiled))
                seen.pop(k)
    finally:
        PartitionRuntime.run = original
    return out


def capture(engine, inputs):
    import torch
    from hybrid_trt import cudagraphs
    graph = cudagraphs._inspectable_graph()
    with torch.no_grad(), torch.cuda.graph(graph, capture_error_mode="thread_local"):
        outs = engine(inputs)
    try:
        types = cudagraphs.graph_node_types(graph.raw_cuda_graph())
        text = ", ".join(f"{NODE_TYPES.get(k, k)}={v}" for k, v in sorted(types.items()))
    except Exception as e:  # noqa: BLE001 - diagnostic output only
        types, text = {}, f"node types unreadable: {e}"
    return graph, outs, types, text


# ---------------------------------------------------------------------------------------------- variants


def run_raw(replay: int, session_first: bool) -> None:
    import torch
    engines = ort_engines()
    step(f"{len(engines)} ORT engine(s): {[n for n, *_ in engines]}")
    for name, engine, inputs, _compiled in engines:
        engine(inputs)  # warm-up, uncaptured
        torch.cuda.synchronize()
        step(f"{name}: capture")
        graph, outs, types, text = capture(engine, inputs)
        step(f"{name}: captured; nodes: {text}")
        if replay:
            if hasattr(graph, "instantiate"):
                graph.instantiate()
            for i in range(replay):
                graph.replay()
                torch.cuda.synchronize()
                step(f"{name}: replay {i + 1} done")
        if session_first:
            step(f"{name}: destroying the ORT session (graph alive)")
            engine._session = None
            gc.collect()
            torch.cuda.synchronize()
            step(f"{name}: session destroyed; destroying the graph")
            del graph, outs
            gc.collect()
            torch.cuda.synchronize()
        else:
            step(f"{name}: destroying the graph (session alive)")
            del graph, outs
            gc.collect()
            torch.cuda.synchronize()
            step(f"{name}: graph destroyed; destroying the ORT session")
            engine._session = None
            gc.collect()
            torch.cuda.synchronize()
        step(f"{name}: both destroyed")
    step("releasing the compiled functions")
    del engines
    gc.collect()
    torch._dynamo.reset()
    torch.cuda.synchronize()


def run_nodes() -> None:
    import torch
    for name, engine, inputs, _compiled in ort_engines():
        engine(inputs)
        torch.cuda.synchronize()
        graph, outs, types, text = capture(engine, inputs)
        print(f"NODES {name}: {text}{'  <-- host-function node(s)' if types.get(3) else ''}", flush=True)
        del graph, outs
        torch.cuda.synchronize()


def run_compiled(guarded: bool, reset_first: bool) -> None:
    import torch
    import hybrid_trt
    from hybrid_trt import cudagraphs
    if not guarded:
        cudagraphs._unreplayable = lambda graph: None  # the probe as it was: a successful capture is enough
        step("probe replay check OFF (code before the fix)")
    (na, a, xa), (nb, b, xb) = models()
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    start = len(hybrid_trt.reports())
    with torch.no_grad():
        ca = torch.compile(a, backend="hybrid_trt", mode="reduce-overhead")
        cb = torch.compile(b, backend="hybrid_trt", mode="reduce-overhead")
        for i in range(5):
            ya = ca(xa + i).clone()
            yb = [t.clone() for t in cb(xb * (1 + 0.1 * i))]
            torch.cuda.synchronize()
            err = (ya - a(xa + i)).abs().max().item()
            step(f"alternating call {i}: {na} max |err| {err:.2e}; {nb} outputs {[tuple(t.shape) for t in yb]}")
    for r in hybrid_trt.reports()[start:]:
        status, reasons = (r.cuda_graphs.status, r.cuda_graphs.reasons) if r.cuda_graphs else (None, [])
        print(f"REPORT graph {r.graph_index}: CUDA graphs {status}; reasons {reasons}", flush=True)
        for p in r.partitions:
            print(f"REPORT   partition {p.index} {p.status}: {p.events}", flush=True)
    if reset_first:
        step("torch._dynamo.reset() with both compiled models alive")
        torch._dynamo.reset()
        torch.cuda.synchronize()
    step(f"del {na} compiled; gc")
    del ca, ya
    gc.collect()
    torch.cuda.synchronize()
    step(f"del {nb} compiled; gc")
    del cb, yb
    gc.collect()
    torch.cuda.synchronize()
    step("torch._dynamo.reset()")
    torch._dynamo.reset()
    gc.collect()
    torch.cuda.synchronize()
    step("teardown finished")


def run_variant(name: str) -> None:
    import torch
    if not torch.cuda.is_available():
        print("SKIP: no CUDA device", flush=True)
        return
    {"nodes": run_nodes,
     "raw_replay_graph_first": lambda: run_raw(3, session_first=False),
     "raw_replay_session_first": lambda: run_raw(3, session_first=True),
     "raw_noreplay_session_first": lambda: run_raw(0, session_first=True),
     "compiled": lambda: run_compiled(True, False),
     "compiled_unguarded": lambda: run_compiled(False, False),
     "compiled_reset_first": lambda: run_compiled(True, True)}[name]()
    step("variant body finished; interpreter exit follows")


# ---------------------------------------------------------------------------------------------- driver


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variant", choices=VARIANTS, help="run one variant in this process")
    ap.add_argument("--only", nargs="*", choices=VARIANTS, help="subset of variants (default: all)")
    ap.add_argument("--timeout", type=float, default=160.0, help="seconds per variant (they run in parallel)")
    args = ap.parse_args()
    if args.variant:
        run_variant(args.variant)
        return 0
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONFAULTHANDLER": "1",
           "TORCHINDUCTOR_COMPILE_THREADS": os.environ.get("TORCHINDUCTOR_COMPILE_THREADS", "2")}
    logs = pathlib.Path(os.environ.get("OUT", "/tmp")) / "cudagraph_teardown_probe"
    logs.mkdir(parents=True, exist_ok=True)
    procs = {}
    for v in args.only or VARIANTS:
        f = open(logs / f"{v}.log", "w")
        child_env = {**env, "HYBRID_TRT_CACHE_DIR": str(logs / f"{v}_cache")}  # each variant builds its engines
        procs[v] = (subprocess.Popen([sys.executable, __file__, "--variant", v], stdout=f, stderr=subprocess.STDOUT,
                                     cwd=ROOT, env=child_env), f, time.perf_counter())
    results = {}
    deadline = time.perf_counter() + args.timeout
    while procs:
        for v, (p, f, t0) in list(procs.items()):
            rc = p.poll()
            if rc is None and time.perf_counter() < deadline:
                continue
            if rc is None:
                p.kill()
                rc = "timeout"
                p.wait()
            f.close()
            text = (logs / f"{v}.log").read_text(errors="replace")
            print(f"===== {v} (rc={rc}, {time.perf_counter() - t0:.0f} s) =====", flush=True)
            lines = text.splitlines()
            print("\n".join(lines[-60:]), flush=True)
            last = [ln for ln in lines if "STEP" in ln]
            results[v] = (rc, last[-1].split("STEP", 1)[1].strip() if last else "(no step reached)")
            del procs[v]
        time.sleep(0.5)
    print("===== SUMMARY =====", flush=True)
    for v in args.only or VARIANTS:
        rc, last = results[v]
        verdict = "OK" if rc == 0 else f"ABORT rc={rc}" if rc != "timeout" else "TIMEOUT"
        print(f"SUMMARY {v:28s} {verdict:14s} last step: {last}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
