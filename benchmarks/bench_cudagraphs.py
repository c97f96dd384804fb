"""CUDA graphs on the GPU: hybrid_trt with CUDA graphs (``mode="reduce-overhead"``) against Inductor's and ONNX
Runtime's.

    python benchmarks/bench_cudagraphs.py --out cg.md [--budget-s 400] [--models resnet18,detector,...]
                                          [--configs fp16:1,fp32:1,fp16:16,fp32:16] [--no-lidar]

Per model, dtype and batch, in one process: eager, Inductor, Inductor ``reduce-overhead``, hybrid_trt, hybrid_trt
with CUDA graphs, ONNX Runtime on the whole model (CUDA provider) and the same with its own CUDA graph
(``enable_cuda_graph``; exported with torch.onnx, the row says so where export or the graph fails). Each callable
is checked against eager, then all are timed in interleaved rounds (median wall time per call, synchronised).
Recipe variants (hybrid_cg_mp_recipe, inductor_ro_recipe): their base plus README "Per-call cost"'s guard recipe.
Whole-runner variants (hybrid_cg_whole, hybrid_cg_mp_whole[_recipe]): ``cuda_graph_runner="whole"``; "CG floor"
(cg_floor): the model's Inductor compile captured by hand and replayed bare, the least a torch-side call can cost.
Inductor r-o copy: Inductor `reduce-overhead` on a deep copy of the model, an A/A pair with Inductor r-o (the spread
between two compiles of one program, in the same rounds).
TF32 is off everywhere, and so is ONNX Runtime's ``use_tf32`` for float32 models; an fp16 model's session has it
on, as hybrid_trt's fp16 engines do (hybrid_trt/delegates/tf32.py: TF32 reaches no fp16 op, but ``use_tf32=0``
keeps ONNX Runtime's fp16 convolutions off the tensor cores). No max-autotune anywhere.

Robust and bounded: the tasks run in a child process that prints one JSON row per task; a crash loses only the
task it happened in (the parent starts a new child for the rest), and tasks are run in priority order (all
models at fp16 batch 1 first, then the LiDAR example end to end, then the other configurations) while the time
budget lasts; the rest are listed as not run. The table is rewritten after every row.
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

MODELS = ("resnet18", "detector", "resnet50", "mobilenet_v3_large", "efficientnet_b0", "convnext_tiny")
CONFIGS = ("fp16:1", "fp32:1", "fp16:16", "fp32:16")
VARIANTS = ("eager", "inductor", "inductor_ro", "hybrid", "hybrid_cg", "hybrid_mp", "hybrid_cg_mp", "hybrid_nhwc",
            "hybrid_cg_nhwc", "hybrid_mp_nhwc", "hybrid_cg_mp_nhwc", "ort", "ort_cg", "hybrid_cg_mp_recipe",
            "inductor_ro_recipe", "inductor_ro_copy", "inductor_cg_flat", "inductor_cg_flat_recipe", "cg_floor",
            "hybrid_cg_whole", "hybrid_cg_mp_whole", "hybrid_cg_mp_whole_recipe", "package", "package_cg")
LABELS = {"eager": "eager", "inductor": "Inductor", "inductor_ro": "Inductor r-o", "hybrid": "hybrid",
          "hybrid_cg": "hybrid CG", "hybrid_mp": "hybrid MP", "hybrid_cg_mp": "hybrid CG MP",
          "hybrid_nhwc": "hybrid NHWC", "hybrid_cg_nhwc": "hybrid CG NHWC", "hybrid_mp_nhwc": "hybrid MP NHWC",
          "hybrid_cg_mp_nhwc": "hybrid CG MP NHWC", "ort": "ORT", "ort_cg": "ORT CG",
          "hybrid_cg_mp_recipe": "hybrid CG MP recipe", "inductor_ro_recipe": "Inductor r-o recipe",
          "inductor_ro_copy": "Inductor r-o copy", "inductor_cg_flat": "Inductor CG, no trees",
          "inductor_cg_flat_recipe": "Inductor CG, no trees, recipe", "cg_floor": "CG floor",
          "hybrid_cg_whole": "hybrid CG whole", "hybrid_cg_mp_whole": "hybrid CG MP whole",
          "hybrid_cg_mp_whole_recipe": "hybrid CG MP whole recipe", "package": "package",
          "package_cg": "package CG"}
# MP: placement="measured" (hybrid_trt/placement.py): partitions stay delegated only where measured faster.
# "hybrid CG" pins placement="delegate" (every supported partition delegated, the rows before the default
# changed); "hybrid CG MP" is what mode="reduce-overhead" does by default on a GPU since then (placement "auto").
# "NHWC": ONNX Runtime's CUDA provider runs convolutions channels-last (onnxruntime_cuda_layout="nhwc"); the
# variants without it pin "nchw", the provider's own default.
_OPTIONS = {"hybrid": {"placement": "delegate"}, "hybrid_cg": {"cuda_graphs": True, "placement": "delegate"},
            "hybrid_mp": {"placement": "measured"}, "hybrid_cg_mp": {"placement": "measured", "cuda_graphs": True},
            "hybrid_cg_whole": {"cuda_graphs": True, "cuda_graph_runner": "whole", "placement": "delegate"},
            "hybrid_cg_mp_whole": {"placement": "measured", "cuda_graphs": True, "cuda_graph_runner": "whole"}}
_OPTIONS = {**{k: {**v, "onnxruntime_cuda_layout": "nchw"} for k, v in _OPTIONS.items()},
            **{f"{k}_nhwc": {**v, "onnxruntime_cuda_layout": "nhwc"} for k, v in _OPTIONS.items()}}
# "recipe": README "Per-call cost"'s guard recipe on top of a base variant (bench_cpu_whole.py's
# "recipe_free_tensors"): these Dynamo settings while the frame compiles (Dynamo builds the guards then, at the first
# call) and, for hybrid_trt, guard_filter_fn=hybrid_trt.skip_guards_on_baked_weights. They thin Dynamo's frame.
_RECIPE = {"hybrid_cg_mp_recipe": "hybrid_cg_mp", "inductor_ro_recipe": "inductor_ro",
           "inductor_cg_flat_recipe": "inductor_cg_flat", "hybrid_cg_mp_whole_recipe": "hybrid_cg_mp_whole"}
# "Inductor r-o copy": Inductor reduce-overhead once more, on a deep copy of the model (its own parameters, so its own
# Dynamo entry, compiled graph and CUDA graph). Its ratio to "Inductor r-o" is the spread between two compiles of one
# program in the same rounds: a hybrid ratio within it is no difference this benchmark can see.
_RECIPE_PATCH = {"use_recursive_dict_tags_for_guards": True, "install_free_tensors": True}
# "Inductor CG, no trees": a reference only, what a torch-side graph costs per call without the bookkeeping of
# cudagraph trees (Inductor's older cudagraphify: static inputs copied in, one replay, and the same static output
# tensors returned at every call, silently overwritten by the next: no memory pool shared across graphs, no check
# of outputs kept alive). Not something hybrid_trt offers: its outputs follow reduce-overhead's rules.
_FLAT_CG = {"triton.cudagraphs": True, "triton.cudagraph_trees": False}
# "CG floor": a reference only, the least a torch-side graph can cost per call: Inductor's compiled model (default
# mode) captured by hand with torch.cuda.graph, and each call one input copy and one replay, with no Dynamo frame,
# no wrapper and no check at all (outputs overwritten by the next call). What any per-call layer is measured against.


# "package": the model exported (hybrid_trt.export, default options) and loaded back (hybrid_trt.load): no Dynamo
# frame, AOTInductor's code around the engines; "package CG": exported with options={"cuda_graphs": True} (placement
# timed for replays; before session 31 it was the same package as "package", placed by uncaptured timings) and
# loaded with cuda_graphs=True (each shape's whole call replayed from one CUDA graph, outputs the caller's own,
# whole_graph.py). The export's own check against eager is
# loose here (fp16); the table's error column is the benchmark's.
_PACKAGE_TOL = {"float16": 1e-1, "float32": 1e-2}


# ---------------------------------------------------------------------------------------------- child


def _model(name: str, dtype, batch: int):
    import torch
    from examples.models import EXAMPLES, build
    if name in EXAMPLES:
        model, x = build(name)
        x = x.expand(batch, *x.shape[1:]).contiguous()
    else:
        import torchvision
        torch.manual_seed(0)
        model, x = torchvision.models.get_model(name, weights=None).eval(), torch.randn(batch, 3, 224, 224)
    return model.cuda().to(dtype), x.cuda().to(dtype)


def _outputs(out) -> list:
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _rel_err(name: str, got, ref) -> float:
    """Max abs error over the outputs relative to the reference's largest magnitude. The detector's top-k may
    order near-equal peaks differently, so its scores are compared sorted and its boxes are left out."""
    got, ref = _outputs(got), _outputs(ref)
    if name == "detector":
        got, ref = [got[1].sort(-1).values], [ref[1].sort(-1).values]
    worst = 0.0
    for g, r in zip(got, ref):
        scale = max(float(r.double().abs().max()), 1.0)
        worst = max(worst, float((g.double() - r.double()).abs().max()) / scale)
    return worst


def _ort_session(x, ref, cuda_graph: bool, onnx_path: str):
    """ONNX Runtime (CUDA provider) on the whole exported model, IO-bound to static device buffers, on a stream
    of its own ordered after torch's (an event, no host sync); with ``cuda_graph`` its own CUDA graph."""
    import numpy as np
    import onnxruntime as ort
    import torch
    stream = torch.cuda.Stream()
    opts = {"device_id": str(torch.cuda.current_device()), "use_tf32": "1" if x.dtype == torch.float16 else "0",
            "user_compute_stream": str(stream.cuda_stream)}
    if cuda_graph:
        opts["enable_cuda_graph"] = "1"
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(onnx_path, so, providers=[("CUDAExecutionProvider", opts)])
    if sess.get_providers()[0] != "CUDAExecutionProvider":
        raise RuntimeError(f"session providers {sess.get_providers()}")
    np_dtype = {torch.float32: np.float32, torch.float16: np.float16, torch.int64: np.int64,
                torch.int32: np.int32, torch.bool: np.bool_}
    x_static = x.clone()
    outs = [torch.empty_like(r) for r in _outputs(ref)]
    binding = sess.io_binding()
    inp = sess.get_inputs()[0]
    binding.bind_input(inp.name, "cuda", torch.cuda.current_device(), np_dtype[x.dtype], list(x.shape),
                       x_static.data_ptr())
    for o, t in zip(sess.get_outputs(), outs):
        binding.bind_output(o.name, "cuda", torch.cuda.current_device(), np_dtype[t.dtype], list(t.shape),
                            t.data_ptr())
    caller = torch.cuda.current_stream()

    def run(inp_tensor):
        x_static.copy_(inp_tensor)
        stream.wait_stream(caller)
        sess.run_with_iobinding(binding)  # ends with ONNX Runtime's own stream sync
        return tuple(outs) if len(outs) > 1 else outs[0]
    return run


def _export(model, x, path: str) -> str:
    import torch
    errors = []
    for dynamo in (False, True):
        try:
            torch.onnx.export(model, (x,), path, dynamo=dynamo, opset_version=17 if not dynamo else None)
            return "torchscript exporter" if not dynamo else "dynamo exporter"
        except Exception as e:  # noqa: BLE001 - try the other exporter
            errors.append(f"dynamo={dynamo}: {type(e).__name__}: {str(e).splitlines()[0][:120]}")
    raise RuntimeError("torch.onnx.export failed: " + "; ".join(errors))


def _first_call_patched(fn, patch: dict):
    """``fn`` with its first call (where Dynamo traces the frame and builds its guards) under
    ``torch._dynamo.config.patch(patch)``. The settings are read only then, so later calls need no patch; the
    callers time ``.compiled`` (``fn`` itself) after the first call, so the timed path has no wrapper at all."""
    import torch

    def call(*args):
        if call.pending:
            with torch._dynamo.config.patch(patch):
                out = fn(*args)
            call.pending = False
            return out
        return fn(*args)
    call.pending, call.compiled = True, fn
    return call


def _compiled(v: str, model, fullgraph: bool = False):
    """The eager, Inductor and hybrid_trt variants (a recipe variant as its base plus the recipe)."""
    import torch
    import hybrid_trt
    if v == "eager":
        return model
    base = _RECIPE.get(v, v)
    if v == "inductor_ro_copy":
        model, base = copy.deepcopy(model), "inductor_ro"
    if base == "inductor_cg_flat":
        fn = torch.compile(model, backend="inductor", options=dict(_FLAT_CG), fullgraph=fullgraph)
    elif base in ("inductor", "inductor_ro"):
        fn = torch.compile(model, backend="inductor", mode="reduce-overhead" if base == "inductor_ro" else None,
                           fullgraph=fullgraph)
    elif base in _OPTIONS:
        options = dict(_OPTIONS[base])  # a copy: torch.compile pops guard_filter_fn out of the dict it is given
        if v in _RECIPE:
            options["guard_filter_fn"] = hybrid_trt.skip_guards_on_baked_weights
        fn = torch.compile(model, backend="hybrid_trt", options=options, fullgraph=fullgraph)
    else:
        raise ValueError(v)
    return _first_call_patched(fn, _RECIPE_PATCH) if v in _RECIPE else fn


def floor_capture(model, x, keep_graph: bool = False):
    """The model's Inductor compile (default mode) captured by hand: (graph, its input buffer, its outputs)."""
    import torch
    fn = torch.compile(model, backend="inductor")
    x_static = x.clone()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn(x_static)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph(keep_graph=True) if keep_graph else torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn(x_static)
    return graph, x_static, out


def _cg_floor(model, x):
    graph, x_static, out = floor_capture(model, x)

    def run(inp_tensor):
        x_static.copy_(inp_tensor)
        graph.replay()
        return out
    return run


def _variant(v: str, model, x, ref, workdir: str, name: str):
    if v == "cg_floor":
        return _cg_floor(model, x)
    if v in ("package", "package_cg"):
        import hybrid_trt
        from examples import factories
        replay = v == "package_cg"  # exported for replays: its placement timed them (export's cuda_graphs)
        path = os.path.join(workdir, "model_cg.pkg" if replay else "model.pkg")
        if not os.path.exists(path):
            tol = _PACKAGE_TOL[str(x.dtype).removeprefix("torch.")]
            # the detector's top-k may order near-equal fp16 peaks otherwise: compared detection by detection
            compare = factories.compare_detector if name == "detector" else None
            hybrid_trt.export(model, (x,), path=path, rtol=tol, atol=tol, compare=compare,
                              options={"cuda_graphs": replay})
        return hybrid_trt.load(path, cuda_graphs=replay)
    if v in ("ort", "ort_cg"):
        path = os.path.join(workdir, "whole.onnx")
        if not os.path.exists(path):
            _export(model, x, path)
        return _ort_session(x, ref, v == "ort_cg", path)
    return _compiled(v, model)


def _time(fns: dict, rounds: int, iters: int, warmup: int = 5) -> dict:
    import torch
    times = {k: [] for k in fns}
    for f in fns.values():
        for _ in range(warmup):
            f()
    torch.cuda.synchronize()
    for _ in range(rounds):
        for k, f in fns.items():
            for _ in range(iters):
                t0 = time.perf_counter()
                f()
                torch.cuda.synchronize()
                times[k].append(time.perf_counter() - t0)
    return {k: statistics.median(v) * 1e3 for k, v in times.items()}


def _run_task(task: dict, args) -> dict:
    import torch
    import hybrid_trt
    if task["model"] == "lidar":
        return _run_lidar(task, args)
    dtype = {"fp16": torch.float16, "fp32": torch.float32}[task["dtype"]]
    row = dict(task, ms={}, err={}, compile_s={}, errors={})
    workdir = tempfile.mkdtemp(prefix="bench-cg-")
    with torch.no_grad():
        model, x = _model(task["model"], dtype, task["batch"])
        ref = model(x)
        fns = {}
        for v in args.variants:
            try:
                torch.compiler.cudagraph_mark_step_begin()
                fn = _variant(v, model, x, ref, workdir, task["model"])
                t0 = time.perf_counter()
                out = fn(x)
                torch.cuda.synchronize()
                row["compile_s"][v] = round(time.perf_counter() - t0, 1)
                row["err"][v] = _rel_err(task["model"], out, ref)
                # A CUDA-graph output left alive keeps cudagraph trees warming up (every timed call eager).
                del out
                if v in _RECIPE:  # its patched first call is done: time the compiled function itself
                    fn = fn.compiled
                fns[v] = (lambda f: (lambda: f(x)))(fn)
                if v == "package_cg" and fn.cuda_graphs is not None:
                    row.setdefault("whole_status", {})[v] = "; ".join(
                        [fn.cuda_graphs.status] + fn.cuda_graphs.reasons[:2])
                if v.startswith("hybrid"):
                    rep = hybrid_trt.last_report()
                    print(rep.table(), file=sys.stderr, flush=True)
                    row[f"{v}_partitions"] = sum(p.status == "delegated" for p in rep.partitions)
                    if "_mp" in v:
                        row[f"{v}_placed"] = _placement_summary(rep)
                    if "_whole" in v and rep.cuda_graphs is not None:
                        row.setdefault("whole_status", {})[v] = "; ".join(
                            [rep.cuda_graphs.status] + rep.cuda_graphs.reasons[:2])
                    elif v.startswith("hybrid_cg") and rep.cuda_graphs is not None and "cuda_graphs" not in row:
                        row["cuda_graphs"] = rep.cuda_graphs.status
                        row["cuda_graph_reasons"] = rep.cuda_graphs.reasons[:3]
            except Exception as e:  # noqa: BLE001 - the row records it, the run goes on
                out = None  # (read by no one: frees a failed variant's CUDA-graph output before the next variant)
                row["errors"][v] = f"{type(e).__name__}: {' '.join(str(e).split())[:160]}"
                traceback.print_exc()
        try:
            row["ms"] = _time(fns, args.rounds, args.iters)
        except Exception as e:  # noqa: BLE001
            row["errors"]["timing"] = f"{type(e).__name__}: {' '.join(str(e).split())[:160]}"
            traceback.print_exc()
    return row


def _placement_summary(rep) -> str:
    """e.g. "2 of 3 partitions delegated (ops 120/150); #0 kept: delegate 0.400 ms (wall time), Inductor ..."."""
    kept = [p for p in rep.partitions if p.status == "delegated"]
    text = (f"{len(kept)} of {len(rep.partitions)} partitions delegated "
            f"({sum(p.op_count for p in kept)}/{sum(p.op_count for p in rep.partitions)} partitioned ops)")
    details = [f"#{p.index} {'kept' if p.status == 'delegated' else 'moved'}: "
               f"{p.placement.split(': ', 1)[-1].split(' per call')[0]}" for p in rep.partitions if p.placement]
    return text + (f"; {'; '.join(details[:6])}" if details else "")


def _run_lidar(task: dict, args) -> dict:
    """The LiDAR example end to end (realistic config, fp16): data-dependent sparse parts stay out of graphs."""
    import torch
    import hybrid_trt
    from examples import lidar_detector
    torch._dynamo.config.capture_dynamic_output_shape_ops = True
    row = dict(task, ms={}, err={}, compile_s={}, errors={})
    model = lidar_detector.build_model("realistic").to("cuda", torch.float16)
    feats, coords = lidar_detector.make_inputs("realistic", "cuda", torch.float16, seed=0)
    fns = {}
    with torch.inference_mode():
        expected = model(feats, coords)
        for v in [v for v in args.variants if not v.startswith("ort")]:
            try:
                fn = _compiled(v, model, fullgraph=True)
                t0 = time.perf_counter()
                out = fn(feats, coords)
                torch.cuda.synchronize()
                row["compile_s"][v] = round(time.perf_counter() - t0, 1)
                try:
                    lidar_detector.compare_detections(expected, out, atol=2e-2, rtol=2e-2)
                    row["err"][v] = 0.0
                except AssertionError as e:
                    row["errors"][v] = f"detections differ: {' '.join(str(e).split())[:120]}"
                del out  # as in _run_task: a live CUDA-graph output would keep every timed call in warm-up
                if "_mp" in v:
                    row[f"{v}_placed"] = _placement_summary(hybrid_trt.last_report())
                if v.startswith("hybrid_cg") and hybrid_trt.last_report().cuda_graphs is not None:
                    row["cuda_graphs"] = hybrid_trt.last_report().cuda_graphs.status
                    row["cuda_graph_reasons"] = hybrid_trt.last_report().cuda_graphs.reasons[:3]
                if v in _RECIPE:  # as in _run_task
                    fn = fn.compiled
                fns[v] = (lambda f: (lambda: f(feats, coords)))(fn)
            except Exception as e:  # noqa: BLE001
                out = None  # (as in _run_task)
                row["errors"][v] = f"{type(e).__name__}: {' '.join(str(e).split())[:160]}"
                traceback.print_exc()
        row["ms"] = _time(fns, args.rounds, max(args.iters // 2, 5), warmup=3)
    return row


def child(args) -> None:
    import gc
    import torch
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    # Every variant compiles the same model's frame once more; past Dynamo's recompile limit (8) the later variants
    # would run eager under their own labels. One task compiles at most len(VARIANTS) times.
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 2 * len(VARIANTS))
    torch._dynamo.config.fail_on_recompile_limit_hit = True  # never time an eager fallback as a compiled variant
    os.environ.setdefault("HYBRID_TRT_CACHE_DIR", tempfile.mkdtemp(prefix="bench-cg-store-"))
    tasks = json.loads(args.tasks)
    longest = 0.0
    for task in tasks:
        if time.time() + longest > args.deadline:
            print("ROW " + json.dumps(dict(task, skipped="time budget")), flush=True)
            continue
        print("START " + json.dumps(task), flush=True)
        t0 = time.time()
        try:
            row = _run_task(task, args)
        except Exception as e:  # noqa: BLE001
            traceback.print_exc()
            row = dict(task, errors={"task": f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"})
        row["task_s"] = round(time.time() - t0, 1)
        longest = max(longest, time.time() - t0)
        print("ROW " + json.dumps(row), flush=True)
        torch._dynamo.reset()
        gc.collect()
        torch.cuda.empty_cache()


# ---------------------------------------------------------------------------------------------- parent


def _tasks(models, configs, lidar: bool) -> list:
    tasks = []
    for k, cfg in enumerate(configs):
        dtype, batch = cfg.split(":")
        tasks += [{"model": m, "dtype": dtype, "batch": int(batch)} for m in models]
        if k == 0 and lidar:
            tasks.append({"model": "lidar", "dtype": "fp16", "batch": 1})
    return tasks


def _fmt(ms):
    return f"{ms:.3f}" if isinstance(ms, (int, float)) else "-"


def _ratio(a, b):
    return f"{a / b:.2f}" if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b > 0 else "-"


def to_markdown(rows: list, header: str, variants) -> str:
    lines = [header, "",
             "| model | dtype | batch | " + " | ".join(f"{LABELS.get(v, v)} ms" for v in variants)
             + " | hybrid CG / Inductor r-o | hybrid CG MP / Inductor r-o | hybrid CG / ORT CG | CUDA graphs (hybrid)"
               " | max rel err (hybrid CG, hybrid CG MP, ORT CG) | compile s (hybrid CG, hybrid CG MP)"
               " | NHWC variants / Inductor r-o, / ORT CG | Inductor r-o copy / Inductor r-o (A/A)"
               " | whole runner and package variants / Inductor r-o, / ORT CG (max rel err) |",
             "|" + "---|" * (len(variants) + 12)]
    notes = []
    for r in rows:
        label = f"| {r['model']} | {r['dtype']} | {r['batch']} |"
        if r.get("skipped"):
            lines.append(label + f" not run: {r['skipped']} |")
            continue
        ms = r.get("ms", {})
        err = r.get("err", {})
        lines.append(
            label + " " + " | ".join(_fmt(ms.get(v)) for v in variants)
            + f" | {_ratio(ms.get('hybrid_cg'), ms.get('inductor_ro'))}"
            + f" | {_ratio(ms.get('hybrid_cg_mp'), ms.get('inductor_ro'))}"
            + f" | {_ratio(ms.get('hybrid_cg'), ms.get('ort_cg'))}"
            + f" | {r.get('cuda_graphs', '-')} | {err.get('hybrid_cg', float('nan')):.1e}, "
              f"{err.get('hybrid_cg_mp', float('nan')):.1e}, {err.get('ort_cg', float('nan')):.1e}"
            + f" | {r.get('compile_s', {}).get('hybrid_cg', '-')}, {r.get('compile_s', {}).get('hybrid_cg_mp', '-')}"
            + " | " + "; ".join(f"{LABELS[v]} {_ratio(ms.get(v), ms.get('inductor_ro'))}, "
                                f"{_ratio(ms.get(v), ms.get('ort_cg'))}"
                                for v in variants if v.endswith("_nhwc") and v.startswith("hybrid_cg"))
            + f" | {_ratio(ms.get('inductor_ro_copy'), ms.get('inductor_ro'))}"
            + " | " + "; ".join(f"{LABELS[v]} {_ratio(ms.get(v), ms.get('inductor_ro'))}, "
                                f"{_ratio(ms.get(v), ms.get('ort_cg'))} ({err.get(v, float('nan')):.1e})"
                                for v in variants if "_whole" in v or v.startswith("package")) + " |")
        errs = ", ".join(f"{LABELS[v]} {err[v]:.1e}" for v in variants if v.endswith("_nhwc") and v in err)
        if errs:
            notes.append(f"- {r['model']} {r['dtype']} b{r['batch']} max rel err of the NHWC variants: {errs}")
        for key in [f"{v}_placed" for v in variants if "_mp" in v]:
            if r.get(key):
                notes.append(f"- {r['model']} {r['dtype']} b{r['batch']} {LABELS[key[:-len('_placed')]]} placement: "
                             f"{r[key]}")
        for v, e in r.get("errors", {}).items():
            notes.append(f"- {r['model']} {r['dtype']} b{r['batch']} {LABELS.get(v, v)}: {e}")
        for v, status in r.get("whole_status", {}).items():
            notes.append(f"- {r['model']} {r['dtype']} b{r['batch']} {LABELS[v]}: {status}")
        for why in r.get("cuda_graph_reasons", []):
            notes.append(f"- {r['model']} {r['dtype']} b{r['batch']} hybrid CG not whole: {why}")
    if notes:
        lines += ["", "Notes (errors, and why hybrid's capture was not whole):", *notes]
    return "\n".join(lines) + "\n"


def _header() -> str:
    import subprocess as sp
    code = ("import torch, onnxruntime as o; print(torch.cuda.get_device_name(), '| torch', torch.__version__, "
            "'| onnxruntime', o.__version__, o.get_available_providers())")
    machine = sp.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip()
    commit = sp.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    return (f"Machine: {machine}; commit {commit}; {time.strftime('%Y-%m-%d')}. Median wall ms per call with "
            "torch.cuda.synchronize(), interleaved rounds in one process; TF32 off; max rel err = max abs error "
            "vs eager / max |eager output|.")


def parent(args) -> None:
    tasks = _tasks(args.models.split(","), args.configs.split(","), not args.no_lidar)
    deadline = time.time() + args.budget_s
    header = _header()
    rows: dict = {}
    pending = list(tasks)

    def write():
        ordered = [rows.get(json.dumps(t, sort_keys=True), dict(t, skipped="time budget")) for t in tasks]
        text = to_markdown(ordered, header, args.variants)
        if args.out:
            with open(args.out, "w") as f:
                f.write(text)
        return text

    while pending and time.time() < deadline:
        cmd = [sys.executable, os.path.abspath(__file__), "--child", "--tasks", json.dumps(pending),
               "--deadline", str(deadline), "--rounds", str(args.rounds), "--iters", str(args.iters),
               "--variants", ",".join(args.variants)]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, cwd=ROOT)
        killed = []
        watchdog = threading.Timer(max(deadline + args.grace_s - time.time(), 1.0),
                                   lambda: (killed.append(True), proc.kill()))
        watchdog.start()
        current = None
        try:
            for line in proc.stdout:
                if line.startswith("START "):
                    current = json.loads(line[6:])
                elif line.startswith("ROW "):
                    row = json.loads(line[4:])
                    key = json.dumps({k: row[k] for k in ("model", "dtype", "batch")}, sort_keys=True)
                    rows[key] = row
                    pending = [t for t in pending if json.dumps(t, sort_keys=True) != key]
                    current = None
                    print(write().splitlines()[-1] if not row.get("skipped") else f"skipped {key}", flush=True)
        finally:
            proc.wait()
            watchdog.cancel()
        if current is not None:  # the child died inside a task: record it, go on with the rest
            key = json.dumps(current, sort_keys=True)
            why = "killed: over the time budget" if killed else f"child process died (exit {proc.returncode})"
            rows[key] = dict(current, errors={"task": why})
            pending = [t for t in pending if json.dumps(t, sort_keys=True) != key]
    print(write())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--configs", default=",".join(CONFIGS), help="dtype:batch, in priority order")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--no-lidar", action="store_true")
    ap.add_argument("--budget-s", type=float, default=400.0, help="no new task starts after this")
    ap.add_argument("--grace-s", type=float, default=45.0, help="a task still running this long after the "
                                                                "budget is killed")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--tasks", help=argparse.SUPPRESS)
    ap.add_argument("--deadline", type=float, help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.variants = [v for v in args.variants.split(",") if v]
    unknown = set(args.variants) - set(VARIANTS)
    if unknown:
        ap.error(f"unknown variants {sorted(unknown)}; valid: {VARIANTS}")
    if args.child:
        child(args)
    else:
        parent(args)


if __name__ == "__main__":
    main()
