"""Where one call of a CUDA-graph-compiled model spends its time: hybrid_trt's ``mode="reduce-overhead"`` against
Inductor's own, same process, same inputs (issue 10's open question: the whole call exceeded the replay's device
time by more than Inductor's call did).

    python benchmarks/profile_cudagraph_call.py --out prof.md [--models resnet50,mobilenet_v3_large]
                                                [--configs fp32:16,fp32:1] [--variants inductor_ro,hybrid_cg_mp]

Per model, dtype and batch, each variant is compiled and checked against eager, then measured four ways, in
interleaved rounds:

- **wall**: launch to return after ``torch.cuda.synchronize()`` (what ``bench_cudagraphs.py`` reports);
- **host**: launch to return without waiting (the Python and launch work of the call);
- **device span**: CUDA events recorded on the caller's stream just before and just after the call, so it is the
  stream's time from the call's first enqueued work to its last, idle gaps inside included;
- **profiler**: one ``torch.profiler`` window of a few calls: per call, the CUDA runtime calls the host made
  (graph launches, copies, event waits, synchronisations) and the GPU time of every kernel and copy by name.

plus a ``cProfile`` of many calls (the Python functions the call passes through, by own time). Models and the
variants' options are ``bench_cudagraphs.py``'s.
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
from collections import Counter, defaultdict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import bench_cudagraphs as bcg  # noqa: E402  (models, variants, error metric)

_RUNTIME_CALLS = ("cudaGraphLaunch", "cudaMemcpyAsync", "cudaMemsetAsync", "cudaLaunchKernel", "cuLaunchKernel",
                  "cudaStreamWaitEvent", "cudaEventRecord", "cudaStreamSynchronize", "cudaEventSynchronize",
                  "cudaDeviceSynchronize", "cudaStreamIsCapturing", "cudaMalloc", "cudaFree",
                  "cudaStreamGetCaptureInfo", "cudaPointerGetAttributes")


def _measure(fns: dict, rounds: int, iters: int) -> dict:
    import torch
    out = {k: {"wall": [], "host": [], "span": []} for k in fns}
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(rounds):
        for k, f in fns.items():
            for _ in range(iters):
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                start.record()
                f()
                end.record()
                t1 = time.perf_counter()
                torch.cuda.synchronize()
                t2 = time.perf_counter()
                out[k]["wall"].append((t2 - t0) * 1e3)
                out[k]["host"].append((t1 - t0) * 1e3)
                out[k]["span"].append(start.elapsed_time(end))
    return {k: {m: statistics.median(v) for m, v in d.items()} for k, d in out.items()}


def _profile(fn, calls: int) -> dict:
    """Per call: CUDA runtime calls by name (count), GPU time by kernel/copy name (us), and the GPU busy time."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
            torch.cuda.synchronize()
    runtime, device = Counter(), defaultdict(float)
    busy = 0.0
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            device[e.name] += e.device_time_total if hasattr(e, "device_time_total") else e.cuda_time_total
            busy += e.device_time_total if hasattr(e, "device_time_total") else e.cuda_time_total
        elif e.name in _RUNTIME_CALLS or e.name.startswith("cuda"):
            runtime[e.name] += 1
    top = sorted(device.items(), key=lambda kv: -kv[1])[:12]
    return {"runtime": {k: v / calls for k, v in sorted(runtime.items())},
            "busy_us": busy / calls, "kernels": len([e for e in prof.events()
                                                      if e.device_type == torch.autograd.DeviceType.CUDA]) / calls,
            "top": [(name[:90], us / calls) for name, us in top]}


def _cprofile(fn, calls: int, lines: int = 22) -> str:
    import torch
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(calls):
        fn()
        torch.cuda.synchronize()
    pr.disable()
    s = io.StringIO()
    pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(lines)
    text = s.getvalue()
    return text[text.find("ncalls"):] if "ncalls" in text else text


def run_case(model_name: str, dtype_name: str, batch: int, variants, args) -> str:
    import tempfile
    import torch
    dtype = {"fp16": torch.float16, "fp32": torch.float32}[dtype_name]
    lines = [f"## {model_name} {dtype_name} batch {batch}", ""]
    with torch.no_grad():
        model, x = bcg._model(model_name, dtype, batch)
        ref = model(x)
        fns, errs = {}, {}
        workdir = tempfile.mkdtemp(prefix="prof-cg-")
        for v in variants:
            try:
                torch.compiler.cudagraph_mark_step_begin()
                fn = bcg._variant(v, model, x, ref, workdir)
                for _ in range(3):
                    out = fn(x)
                torch.cuda.synchronize()
                errs[v] = bcg._rel_err(model_name, out, ref)
                # A live output keeps CUDA-graph trees in warm-up (eager runs, never a replay) until it dies.
                del out
                fns[v] = (lambda f: (lambda: f(x)))(fn)
            except Exception as e:  # noqa: BLE001 - the table says so, the other variants go on
                lines.append(f"- {v}: {type(e).__name__}: {' '.join(str(e).split())[:200]}")
        for f in fns.values():
            for _ in range(10):
                f()
        stats = _measure(fns, args.rounds, args.iters)
        lines += ["| variant | wall ms | host ms | device span ms | wall - span ms | max rel err |",
                  "|---|---|---|---|---|---|"]
        for v, s in stats.items():
            lines.append(f"| {bcg.LABELS.get(v, v)} | {s['wall']:.3f} | {s['host']:.3f} | {s['span']:.3f} | "
                         f"{s['wall'] - s['span']:.3f} | {errs[v]:.1e} |")
        lines.append("")
        for v, f in fns.items():
            p = _profile(f, args.profile_calls)
            lines.append(f"### {bcg.LABELS.get(v, v)}: profiler, per call ({args.profile_calls} calls)")
            lines.append("")
            lines.append(f"GPU activity records {p['kernels']:.1f}, GPU busy {p['busy_us']:.1f} us; CUDA runtime "
                         "calls: " + ", ".join(f"{k} {c:g}" for k, c in p["runtime"].items()))
            lines.append("")
            lines.append("| GPU work (kernel or copy) | us per call |")
            lines.append("|---|---|")
            lines += [f"| `{name}` | {us:.1f} |" for name, us in p["top"]]
            lines.append("")
        for v, f in fns.items():
            lines.append(f"### {bcg.LABELS.get(v, v)}: cProfile of {args.cprofile_calls} calls (with a synchronize "
                         "each), by own time")
            lines += ["", "```", _cprofile(f, args.cprofile_calls).rstrip(), "```", ""]
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="resnet50,mobilenet_v3_large")
    ap.add_argument("--configs", default="fp32:16,fp32:1")
    ap.add_argument("--variants", default="inductor_ro,hybrid_cg_mp,hybrid_cg")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--profile-calls", type=int, default=5)
    ap.add_argument("--cprofile-calls", type=int, default=200)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    header = (f"# One call under CUDA graphs, where the time goes\n\nMachine: {torch.cuda.get_device_name()}, "
              f"{os.cpu_count()} CPU cores, {platform.system()} {platform.machine()}, Python "
              f"{platform.python_version()}, torch {torch.__version__}; `{' '.join(sys.argv)}`\n")
    parts = [header]
    for model_name in args.models.split(","):
        for cfg in args.configs.split(","):
            dtype_name, batch = cfg.split(":")
            try:
                parts.append(run_case(model_name, dtype_name, int(batch), args.variants.split(","), args))
            except Exception as e:  # noqa: BLE001
                parts.append(f"## {model_name} {cfg}\n\nfailed: {type(e).__name__}: {e}\n")
            torch._dynamo.reset()
            with open(args.out, "w") as f:
                f.write("\n\n".join(parts) + "\n")
            print(parts[-1], flush=True)


if __name__ == "__main__":
    main()
