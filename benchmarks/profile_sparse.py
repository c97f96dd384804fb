"""Where the time of sparse rulebook construction goes (GPU machine).

Default: for the SubM (3x3x3) and strided (3x3x3, stride 2, padding 1)
rulebooks at 10k, 50k and 150k voxels of the realistic LiDAR cloud
(examples/lidar_detector.py, grid 41 x 1600 x 1408, batch 1: the clouds
bench_sparse.py times its fp16 layers on; rulebooks do not depend on the
feature dtype), one table row per step of the launcher
(triton_rulebook.subm_rulebook / strided_rulebook, whose ``mark`` hook names
each step as it starts):

* host ms: perf_counter from one step's start to the next, median of --reps
  calls (no events or profiler in that pass). A step that synchronises
  includes its wait for the GPU.
* GPU ms: CUDA events around each step, recorded while a spin kernel
  (torch.cuda._sleep) keeps the GPU busy until the host has queued every
  step (re-queued after the step that synchronises), so each event pair
  brackets that step's kernels run back to back: GPU time without the gaps
  where the GPU waits for the host. "gaps" counts the calls where the GPU
  caught up anyway (spin too short); it must be 0.
* launches, syncs, allocs: from one torch.profiler pass with a
  record_function range per step: CUDA API calls that enqueue GPU work
  (kernel launches, memsets, memcpys), calls that block the host on the GPU,
  and the tensor factories the launcher itself calls.

Then the cost of one call through the dispatcher: the launcher called
directly, the op through torch.ops (registered with torch.library.Library, as
in ops.py), and the same launcher behind a torch.library.custom_op (the
registration ops.py used before); plus both registrations with an empty
body (dispatch alone). With spconv 2.x importable, its
get_indice_pairs_implicit_gemm (the call its modules make to build the same
rulebooks, with their mask argsort) is timed next to ours.

    python benchmarks/profile_sparse.py --out profile_rulebooks.md
    python benchmarks/profile_sparse.py --layers      # layer profiles, ours vs spconv-triton
    python benchmarks/profile_sparse.py --e2e         # examples/lidar_detector.py, eager/inductor/hybrid_trt
    python benchmarks/profile_sparse.py --smoke       # CPU, Triton interpreter, tiny cloud: checks the script
    python benchmarks/profile_sparse.py --dispatch    # host cost of one sparse_conv_compute call (CPU or GPU)

Use it to decide what to optimise; bench_sparse.py is the benchmark of record.
"""

from __future__ import annotations

import argparse
import functools
import os
import pathlib
import platform
import statistics
import subprocess
import sys
import time
from typing import Optional

if "--smoke" in sys.argv:  # the interpreter must be on before Triton is imported
    os.environ["TRITON_INTERPRET"] = "1"

import torch  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples"))

import lidar_detector  # noqa: E402
from hybrid_trt.plugins.sparse import ops  # noqa: E402
from hybrid_trt.plugins.sparse import triton_rulebook as T  # noqa: E402
from hybrid_trt.plugins.sparse.geometry import conv_output_shape  # noqa: E402

GRID = (41, 1600, 1408)
KS, STRIDE, PAD, DIL = (3, 3, 3), (2, 2, 2), (1, 1, 1), (1, 1, 1)
# CUDA runtime / driver API calls as the profiler names them (some carry a version suffix).
LAUNCH_APIS = ("cudaLaunchKernel", "cuLaunchKernel", "cudaMemsetAsync", "cuMemsetD", "cudaMemcpyAsync", "cuMemcpy")
SYNC_APIS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cuStreamSynchronize",
             "cuCtxSynchronize")
DEVICE_OPS = "device ops"  # key of the whole-call device-side count in profiler_counts' result
FACTORIES = {"aten::empty", "aten::empty_strided", "aten::full", "aten::zeros", "aten::empty_like", "aten::new_empty"}


# ---------------------------------------------------------------- step recorders


class HostMarks:
    """perf_counter at the start of each step."""

    def __init__(self):
        self.names, self.times = [], []

    def __call__(self, name):
        self.names.append(name)
        self.times.append(time.perf_counter())

    def finish(self):
        self.times.append(time.perf_counter())
        return [(n, (b - a) * 1e3) for n, a, b in zip(self.names, self.times, self.times[1:])]


class GpuMarks:
    """CUDA events around each step while a spin kernel keeps the GPU ahead
    of nothing: the host queues all steps behind it (and behind a second one
    after a synchronising step), so the GPU runs them back to back."""

    def __init__(self, spin_cycles: int):
        self.spin = spin_cycles
        self.names, self.events = [], []
        self.gap = False
        torch.cuda._sleep(self.spin)

    def _close(self):
        end = torch.cuda.Event(enable_timing=True)
        end.record()
        self.events[-1].append(end)
        # The spin must still be running when the host has queued the step
        # (after a synchronising step the GPU is idle by definition).
        if not self.names[-1].startswith("sync"):
            self.gap |= torch.cuda.current_stream().query()

    def __call__(self, name):
        if self.names:
            self._close()
            if self.names[-1].startswith("sync"):
                torch.cuda._sleep(self.spin)
        start = torch.cuda.Event(enable_timing=True)
        start.record()
        self.names.append(name)
        self.events.append([start])

    def finish(self):
        self._close()
        torch.cuda.synchronize()
        return [(n, s.elapsed_time(e)) for n, (s, e) in zip(self.names, self.events)], self.gap


class ProfilerMarks:
    """A record_function range per step, named "rb:<step>"."""

    def __init__(self):
        self.current = None

    def __call__(self, name):
        self.finish()
        self.current = torch.profiler.record_function("rb:" + name)
        self.current.__enter__()

    def finish(self):
        if self.current is not None:
            self.current.__exit__(None, None, None)
            self.current = None


def _step_of(event, ranges):
    """The "rb:" range an event happened in: its ancestor, or (for CUDA API
    events the profiler did not nest under a CPU op) the range of its thread
    whose time span holds its start."""
    e = event.cpu_parent
    while e is not None and not e.name.startswith("rb:"):
        e = e.cpu_parent
    if e is not None:
        return e
    t = event.time_range.start
    return next((r for r in ranges if r.thread == event.thread and r.time_range.start <= t <= r.time_range.end), None)


def profiler_counts(call, reps: int, cuda: bool) -> dict:
    """Per step: GPU work enqueued, host-blocking calls and factory calls, per call."""
    acts = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if cuda else [])
    with torch.profiler.profile(activities=acts) as prof:
        for _ in range(reps):
            marks = ProfilerMarks()
            call(marks)
            marks.finish()
        if cuda:
            torch.cuda.synchronize()
    events = prof.events()
    ranges = [e for e in events if e.name.startswith("rb:")]
    counts = {r.name[3:]: {"launches": 0, "syncs": 0, "allocs": 0} for r in ranges}
    device_ops = 0
    for e in events:
        if e.device_type != torch.autograd.DeviceType.CPU:
            device_ops += 1  # kernels, memsets, memcpys as the GPU ran them: a cross-check of "launches"
            continue
        kind = ("launches" if e.name.startswith(LAUNCH_APIS)
                else "syncs" if e.name.startswith(SYNC_APIS) or e.name == "cudaMemcpy"
                else "allocs" if e.name in FACTORIES and e.cpu_parent is not None
                and e.cpu_parent.name.startswith("rb:") else None)
        if kind is None:
            continue
        step = _step_of(e, ranges)
        if step is not None:
            counts[step.name[3:]][kind] += 1
    result = {name: {k: v / reps for k, v in row.items()} for name, row in counts.items()}
    result[DEVICE_OPS] = device_ops / reps
    return result


# ---------------------------------------------------------------- measurements


def sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def median_steps(samples: list[list[tuple[str, float]]]) -> list[tuple[str, float]]:
    names = [n for n, _ in samples[0]]
    return [(n, statistics.median(s[i][1] for s in samples if len(s) == len(names))) for i, n in enumerate(names)]


def step_table(launch, device: str, reps: int) -> tuple[list[dict], int]:
    """Host, GPU and profiler numbers per step of ``launch(mark)``."""
    for _ in range(3):
        launch(None)
    sync(device)
    host = []
    for _ in range(reps):
        sync(device)
        marks = HostMarks()
        launch(marks)
        host.append(marks.finish())
    host = median_steps(host)
    gpu, gaps = {}, 0
    if device == "cuda":
        spin = 2_000_000
        samples = []
        for _ in range(reps):
            marks = GpuMarks(spin)
            launch(marks)
            steps, gap = marks.finish()
            gaps += gap
            if gap:  # the host outran the spin: longer next time, drop this sample
                spin *= 2
            else:
                samples.append(steps)
        gpu = dict(median_steps(samples)) if samples else {}
    counts = profiler_counts(launch, max(3, reps // 10), device == "cuda")
    rows = []
    for name, host_ms in host:
        c = counts.get(name, {"launches": 0.0, "syncs": 0.0, "allocs": 0.0})
        rows.append({"step": name, "host": host_ms, "gpu": gpu.get(name), **c})
    return rows, gaps, counts[DEVICE_OPS]


def host_per_call(fn, device: str, reps: int) -> float:
    """Median host time of one call started on an idle GPU: dispatch and
    launch cost (plus the wait, for a call that synchronises)."""
    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        sync(device)
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    sync(device)
    return statistics.median(times)


def event_per_call(fn, device: str, reps: int) -> float | None:
    """Median time of one call from CUDA events around it, host dispatch included."""
    if device != "cuda":
        return None
    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


# ---------------------------------------------------------------- dispatch variants


@functools.cache
def _custom_op_variants():
    """The launchers behind torch.library.custom_op (ops.py's registration
    before it moved to torch.library.Library), and empty ops of both kinds."""

    @torch.library.custom_op("hybrid_trt_profile::subm", mutates_args=())
    def subm(indices: torch.Tensor, spatial_shape: list[int], kernel_size: list[int],
             dilation: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        return ops._subm_ordered_torch(indices, spatial_shape, kernel_size, dilation)

    @subm.register_kernel("cuda")
    def _(indices, spatial_shape, kernel_size, dilation):
        return ops._subm_ordered_cuda(indices, spatial_shape, kernel_size, dilation)

    @torch.library.custom_op("hybrid_trt_profile::strided", mutates_args=())
    def strided(indices: torch.Tensor, spatial_shape: list[int], kernel_size: list[int], stride: list[int],
                padding: list[int], dilation: list[int]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return ops._strided_torch(indices, spatial_shape, kernel_size, stride, padding, dilation)

    @strided.register_kernel("cuda")
    def _(indices, spatial_shape, kernel_size, stride, padding, dilation):
        return ops._strided_cuda(indices, spatial_shape, kernel_size, stride, padding, dilation)

    @torch.library.custom_op("hybrid_trt_profile::empty_custom_op", mutates_args=())
    def empty_custom_op(indices: torch.Tensor, kernel_size: list[int]) -> torch.Tensor:
        return indices.new_empty(0)

    @torch.library.custom_op("hybrid_trt_profile::conv_compute", mutates_args=())
    def conv_compute(features: torch.Tensor, weight: torch.Tensor, nbr: torch.Tensor, bias: Optional[torch.Tensor],
                     order: Optional[torch.Tensor] = None) -> torch.Tensor:
        return ops._compute_torch(features, weight, nbr, bias, order)

    @conv_compute.register_kernel("cuda")
    def _(features, weight, nbr, bias, order=None):
        return ops._compute_cuda(features, weight, nbr, bias, order)

    @conv_compute.register_fake
    def _(features, weight, nbr, bias, order=None):
        return ops._compute_fake(features, weight, nbr, bias, order)

    lib = torch.library.Library("hybrid_trt_profile", "FRAGMENT")
    lib.define("empty_library(Tensor indices, int[] kernel_size) -> Tensor")
    lib.impl("empty_library", lambda indices, kernel_size: indices.new_empty(0), "CompositeExplicitAutograd")
    return (subm, strided, empty_custom_op, lib, torch.ops.hybrid_trt_profile.empty_library.default,
            conv_compute)


def _race(calls: dict, device: str, reps: int, rounds: int) -> dict:
    """Host us per call of each callable: batches of ``reps`` calls, the
    callables taking turns so that machine noise hits them alike; the best
    batch of ``rounds``. The GPU is synchronised between batches, untimed."""
    for fn in calls.values():
        for _ in range(20):
            fn()
    best = dict.fromkeys(calls, float("inf"))
    for _ in range(rounds):
        for name, fn in calls.items():
            sync(device)
            t0 = time.perf_counter()
            for _ in range(reps):
                fn()
            best[name] = min(best[name], (time.perf_counter() - t0) / reps * 1e6)
    sync(device)
    return best


def compute_dispatch(device: str, reps: int = 200, rounds: int = 30) -> list[str]:
    """Host cost of one sparse_conv_compute call on tiny inputs (64 sites, 8
    channels, 1x1x1 kernel, so the kernel's own work is small): its kernel
    called directly, the op through torch.ops (ops.py: torch.library.Library
    with its autograd kernel) and the same kernels behind a
    torch.library.custom_op (ops.py's registration before), under no_grad
    (bench_sparse.py's layers) and inference_mode (hybrid_trt's compiled
    models). The weight and bias require grad, as a module's parameters do."""
    conv_co = _custom_op_variants()[-1]
    kernel = ops._compute_cuda if device == "cuda" else ops._compute_torch
    n, c = 64, 8
    feats = torch.randn(n, c, device=device)
    weight = torch.nn.Parameter(torch.randn(c, 1, 1, 1, c, device=device))
    bias = torch.nn.Parameter(torch.randn(c, device=device))
    nbr = torch.arange(n, dtype=torch.int32, device=device)[:, None].contiguous()
    order = torch.arange(n, dtype=torch.int32, device=device)
    args = (feats, weight, nbr, bias, order)
    calls = {"kernel, called directly": lambda: kernel(*args),
             "torch.ops (Library)": lambda: ops.sparse_conv_compute(*args),
             "custom_op": lambda: conv_co(*args)}
    lines = ["| grad mode | " + " | ".join(f"{k}, host us" for k in calls) + " | custom_op - Library, us |",
             "|---|" + "---|" * (len(calls) + 1)]
    for mode, ctx in (("no_grad", torch.no_grad), ("inference_mode", torch.inference_mode)):
        with ctx():
            assert torch.equal(ops.sparse_conv_compute(*args), conv_co(*args))
            t = _race(calls, device, reps, rounds)
        lines.append(f"| {mode} | " + " | ".join(f"{v:.1f}" for v in t.values())
                     + f" | {t['custom_op'] - t['torch.ops (Library)']:.1f} |")
    if device == "cpu":
        lines += ["", launcher_python(reps, rounds)]
    return lines


def launcher_python(reps: int, rounds: int) -> str:
    """The CUDA launcher's own Python (triton_gemm.conv_compute up to the
    Triton launch, which is replaced by a no-op) on CPU tensors: 64 sites,
    3x3x3 kernel, 8 channels. Triton's own launch cost is not in it."""
    from hybrid_trt.plugins.sparse import triton_gemm

    class NoLaunch:
        def __getitem__(self, grid):
            return lambda *args, **kwargs: None

    feats = torch.randn(64, 8)
    weight, bias = torch.randn(8, 3, 3, 3, 8), torch.randn(8)
    nbr = torch.zeros(64, 27, dtype=torch.int32)
    order = torch.arange(64, dtype=torch.int32)
    kernel = triton_gemm._implicit_gemm_kernel
    triton_gemm._implicit_gemm_kernel = NoLaunch()
    try:
        with torch.no_grad():
            t = _race({"launcher": lambda: triton_gemm.conv_compute(feats, weight, nbr, bias, order)}, "cpu", reps,
                      rounds)["launcher"]
    finally:
        triton_gemm._implicit_gemm_kernel = kernel
    return f"CUDA launcher's Python per call (triton_gemm.conv_compute, Triton launch replaced by a no-op): {t:.1f} us"


# ---------------------------------------------------------------- spconv 2.x


def _spconv():
    try:
        from spconv.core import ConvAlgo
        from spconv.pytorch import ops as spops
    except Exception:  # noqa: BLE001 - only compared where it is installed and loads
        return None

    def build(coords, subm):
        return spops.get_indice_pairs_implicit_gemm(
            coords, 1, list(GRID), ConvAlgo.MaskImplicitGemm, ksize=list(KS),
            stride=[1, 1, 1] if subm else list(STRIDE), padding=list(PAD), dilation=list(DIL),
            out_padding=[0, 0, 0], subm=subm, transpose=False,
            is_train=not subm,  # what its modules pass in eval mode: regular convs keep the backward pairs
        )

    return build


# ---------------------------------------------------------------- driver


def machine(device: str) -> str:
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                text=True, timeout=10).stdout.strip() or "unknown"
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "hybrid_trt", "benchmarks"], cwd=ROOT,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        commit += " (+ uncommitted changes)" if dirty else ""
    except Exception:  # noqa: BLE001 - a copied tree without git
        commit = "unknown"
    import triton

    interpreted = ", Triton interpreter" if os.environ.get("TRITON_INTERPRET") == "1" else ""
    gpu = torch.cuda.get_device_name() if device == "cuda" else f"none (CPU{interpreted})"
    return (f"GPU: {gpu}; torch {torch.__version__}, triton {triton.__version__}, Python {platform.python_version()}, "
            f"CPU: {platform.processor() or platform.machine()} ({os.cpu_count()} logical); commit {commit}")


def fmt(v, digits=3):
    return "-" if v is None else f"{v:.{digits}f}"


def profile_rulebooks(sizes, reps: int, device: str, grid=GRID) -> str:
    subm_co, strided_co, empty_co, _lib, empty_lib, _ = _custom_op_variants()
    spconv = _spconv() if device == "cuda" else None
    out_grid = conv_output_shape(grid, KS, STRIDE, PAD, DIL)
    lines = [f"# Sparse rulebook profile ({'GPU' if device == 'cuda' else 'smoke run'})", "", machine(device), "",
             f"Cloud: examples/lidar_detector.py realistic generator, grid {grid[0]}x{grid[1]}x{grid[2]}, batch 1. "
             f"SubM 3x3x3; strided 3x3x3 stride 2 padding 1 (output grid {out_grid}). "
             f"Host: median of {reps} calls; GPU: CUDA events with the GPU kept ahead of the host (see the script).",
             ""]
    steps_md = ["| rulebook | N in | M out | step | host ms | GPU ms | GPU ops launched | host syncs | allocs |",
                "|---|---|---|---|---|---|---|---|---|"]
    calls_md = ["| rulebook | N in | launcher, host ms | torch.ops (Library), host ms | custom_op, host ms | "
                "torch.ops, event ms | spconv 2.x, host ms | spconv 2.x, event ms | spconv M out | "
                "interleaved event ms, torch.ops / spconv 2.x | ratio |",
                "|---|---|---|---|---|---|---|---|---|---|---|"]
    notes = []
    for n in sizes:
        cfg = lidar_detector.DetectorConfig(grid=grid, voxels_per_sample=n, batch_size=1)
        _, coords = lidar_detector.make_inputs(cfg, device, torch.float16, seed=0)
        N = coords.shape[0]
        shape_l = list(grid)
        cases = [
            ("SubM", lambda mark: T.subm_rulebook(coords, grid, KS, DIL, mark=mark),
             lambda: ops.sparse_rulebook_subm_ordered(coords, shape_l, list(KS), list(DIL)),
             lambda: subm_co(coords, shape_l, list(KS), list(DIL)), True),
            ("strided", lambda mark: T.strided_rulebook(coords, grid, out_grid, KS, STRIDE, PAD, DIL, mark=mark),
             lambda: ops.sparse_rulebook_strided(coords, shape_l, list(KS), list(STRIDE), list(PAD), list(DIL)),
             lambda: strided_co(coords, shape_l, list(KS), list(STRIDE), list(PAD), list(DIL)), False),
        ]
        for label, launch, via_ops, via_custom, subm in cases:
            result = launch(None)
            M = result[0].shape[0]  # SubM: nbr [N, K]; strided: out_indices [M, 4]
            rows, gaps, device_ops = step_table(launch, device, reps)
            total = {"host": sum(r["host"] for r in rows),
                     "gpu": sum(r["gpu"] for r in rows) if all(r["gpu"] is not None for r in rows) else None}
            for key in ("launches", "syncs", "allocs"):
                total[key] = sum(r.get(key, 0) for r in rows)
            for r in rows + [dict(total, step="**total**")]:
                steps_md.append(f"| {label} | {N} | {M} | {r['step']} | {fmt(r['host'])} | {fmt(r['gpu'])} | "
                                f"{fmt(r.get('launches'), 1)} | {fmt(r.get('syncs'), 1)} | {fmt(r.get('allocs'), 1)} |")
            if device == "cuda":
                notes.append(f"{label} N={N}: {device_ops:.1f} operations ran on the GPU per call (profiler, device "
                             f"side; compare with the launches column's total)")
            if gaps:
                notes.append(f"{label} N={N}: the GPU caught up with the host in {gaps} of {reps} GPU-timing calls "
                             f"(dropped; spin lengthened)")
            # The op must give the launcher's result (the table would time the wrong thing otherwise).
            same = all(torch.equal(a, b) for a, b in zip(via_ops(), result))
            if not same:
                notes.append(f"{label} N={N}: torch.ops result differs from the launcher's")
            sp_host = sp_event = sp_m = None
            duel = "- | -"
            if spconv is not None:
                try:
                    sp = spconv(coords, subm)
                    sp_m = sp[0].shape[0]
                    sp_host = host_per_call(lambda: spconv(coords, subm), device, reps)
                    sp_event = event_per_call(lambda: spconv(coords, subm), device, reps)
                    sp_all = profiler_counts(lambda marks: (marks("spconv"), spconv(coords, subm)),
                                             max(3, reps // 10), True)
                    sp_counts = sp_all.get("spconv", {})
                    notes.append(f"{label} N={N}: spconv get_indice_pairs_implicit_gemm per call: "
                                 f"{fmt(sp_counts.get('launches'), 1)} GPU ops launched "
                                 f"({sp_all[DEVICE_OPS]:.1f} ran on the GPU), "
                                 f"{fmt(sp_counts.get('syncs'), 1)} host syncs, "
                                 f"{fmt(sp_counts.get('allocs'), 1)} torch factory calls")
                    # The comparison of record: both sides in the same rounds (the columns before time each
                    # side in its own block, so a burst of host noise can land on one of them).
                    import bench_sparse as bs  # its interleaved rounds, the layer sweep's measurement

                    both, failed = bs.interleaved_ms({"ours": via_ops, "spconv": lambda: spconv(coords, subm)},
                                                     warmup=3, iters=max(reps, 60))
                    if failed:
                        raise RuntimeError(f"interleaved rounds: {failed}")
                    duel = (f"{fmt(both['ours'])} / {fmt(both['spconv'])} | "
                            f"{fmt(both['ours'] / both['spconv'], 2)}")
                except Exception as e:  # noqa: BLE001 - a comparison column, never the run
                    notes.append(f"{label} N={N}: spconv failed: {type(e).__name__}: {e}")
            calls_md.append(
                f"| {label} | {N} | {fmt(host_per_call(lambda: launch(None), device, reps))} | "
                f"{fmt(host_per_call(via_ops, device, reps))} | {fmt(host_per_call(via_custom, device, reps))} | "
                f"{fmt(event_per_call(via_ops, device, reps))} | {fmt(sp_host)} | {fmt(sp_event)} | "
                f"{sp_m if sp_m is not None else '-'} | {duel} |"
            )
            print("\n".join(steps_md[-len(rows) - 1:]), "\n", calls_md[-1], flush=True)
    tiny = coords[:16]
    library_us = host_per_call(lambda: empty_lib(tiny, [3, 3, 3]), device, reps * 10) * 1e3
    custom_op_us = host_per_call(lambda: empty_co(tiny, [3, 3, 3]), device, reps * 10) * 1e3
    dispatch = (f"Dispatch alone (an op whose body returns an empty tensor, host us per call, median of "
                f"{reps * 10}): torch.library.Library {library_us:.1f}, torch.library.custom_op {custom_op_us:.1f}.")
    lines += ["## Steps", ""] + steps_md + ["", "## One call", ""] + calls_md + ["", dispatch, ""]
    lines += ["## sparse_conv_compute dispatch", "", compute_dispatch.__doc__.split("\n\n")[0].replace("\n    ", " "),
              ""] + compute_dispatch(device) + [""]
    lines += [f"* {n}" for n in notes] + ([""] if notes else [])
    lines += ["Columns: see the docstring of benchmarks/profile_sparse.py. \"GPU ops launched\" counts CUDA API "
              "calls that enqueue work (kernels, memsets, memcpys); \"allocs\" the tensor factories the launcher "
              "calls itself (torch.sort's own buffers not included). A step's GPU ms of a synchronising step is "
              "its device-to-host copy.", ""]
    return "\n".join(lines)


# ---------------------------------------------------------------- layer and end-to-end profiles (unchanged)


def _profile(label: str, fn, sort_by: tuple = ("cuda_time_total",)) -> None:
    import bench_sparse as bs

    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=acts) as prof:
        for _ in range(10):
            fn()
        torch.cuda.synchronize()
    print(f"\n===== {label}: event {bs.cuda_time_ms(fn):.3f} ms, host {host_per_call(fn, 'cuda', 30):.3f} ms "
          f"(per call) =====")
    for key in sort_by:
        print(prof.key_averages().table(sort_by=key, row_limit=25, max_name_column_width=70))


def end_to_end() -> None:
    import bench_sparse as bs

    import hybrid_trt

    model = bs.lidar_detector.build_model("realistic").to("cuda", torch.float16).eval()
    feats, coords = bs.lidar_detector.make_inputs("realistic", "cuda", torch.float16, seed=0)
    torch._dynamo.config.capture_dynamic_output_shape_ops = True
    with torch.inference_mode():
        for mode in ("eager", "inductor", "hybrid_trt"):
            torch._dynamo.reset()
            fn = model if mode == "eager" else torch.compile(model, backend=mode, fullgraph=True)
            fn(feats, coords)
            if mode == "hybrid_trt":
                print(hybrid_trt.last_report().table())
            _profile(f"e2e {mode}", lambda: fn(feats, coords), ("cuda_time_total", "cpu_time_total"))


def layers() -> None:
    import bench_sparse as bs

    from hybrid_trt.plugins.sparse import SparseConv3d, SparseConvTensor, SubMConv3d

    spt = bs.spt
    cases = []
    for c in (64, 128):
        cases.append((f"SubM C={c}", lambda c=c: SubMConv3d(c, c, 3, bias=False),
                      lambda c=c: spt.SubMConv3d(c, c, 3, bias=False)))
    cases.append(("strided s2 C=64", lambda: SparseConv3d(64, 64, 3, stride=2, padding=1, bias=False),
                  lambda: spt.SparseConv3d(64, 64, 3, stride=2, padding=1, bias=False)))
    with torch.no_grad():
        for label, make_ours, make_theirs in cases:
            c = 64 if "64" in label else 128
            cfg = lidar_detector.DetectorConfig(grid=GRID, voxels_per_sample=50000, batch_size=1)
            _, coords = lidar_detector.make_inputs(cfg, "cuda", torch.float16, seed=0)
            feats = torch.randn((coords.shape[0], c), device="cuda", dtype=torch.float16)
            ours = make_ours().to("cuda", torch.float16).eval()
            _profile(f"ours {label}", lambda: ours(SparseConvTensor(feats, coords, GRID, 1)))
            if spt is not None:
                theirs = make_theirs().to("cuda", torch.float16).eval()
                _profile(f"spconv-triton {label}", lambda: theirs(spt.SparseConvTensor(feats, coords, list(GRID), 1)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", help="write the rulebook table (markdown) here")
    parser.add_argument("--sizes", default="10000,50000,150000", help="voxels per cloud, comma-separated")
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--layers", action="store_true", help="layer profiles, ours vs spconv-triton, instead")
    parser.add_argument("--e2e", action="store_true", help="end-to-end profiles of the LiDAR example instead")
    parser.add_argument("--smoke", action="store_true", help="CPU, Triton interpreter, one tiny cloud")
    parser.add_argument("--dispatch", action="store_true",
                        help="only the host cost of one sparse_conv_compute call (runs on CPU too)")
    args = parser.parse_args()
    if args.e2e:
        end_to_end()
        return 0
    if args.layers:
        layers()
        return 0
    if args.dispatch:
        device = "cuda" if torch.cuda.is_available() else "cpu"
        print("\n".join([machine(device), ""] + compute_dispatch(device)))
        return 0
    if args.smoke:
        text = profile_rulebooks([120], 3, "cpu", grid=(41, 64, 64))
    else:
        if not torch.cuda.is_available():
            print("profile_sparse.py needs a CUDA GPU (use --smoke to check the script on CPU)", file=sys.stderr)
            return 2
        text = profile_rulebooks([int(s) for s in args.sizes.split(",")], args.reps, "cuda")
    print(text)
    if args.out:
        pathlib.Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
