"""GPU benchmark of the sparse-conv plugin against native spconv 2.x (the anchor) and spconv-triton.

Layer sweep (default): on a 41 x 1600 x 1408 grid, batch 1, for every voxel count in --voxels, dtype in
--dtypes and run in --runs (the whole sweep repeated in one process), three cases:
  * SubM 3x3x3, C = 64 and C = 128;
  * strided 3x3x3 / stride 2 / padding 1, C = 64.
Each case times two things per library, on a fresh random cloud and the same weights for every library:
  * "layer": the conv on a fresh SparseConvTensor every call, so its rulebook / index pairs are rebuilt;
  * "cached": the conv on pairs built by an earlier call. SubM: the module called on a tensor whose
    indice_dict already holds the layer's indice_key (the reuse a network makes), for every library alike
    (spconv copies indice_dict into its *output*, so calling it again on the same input tensor would rebuild).
    Strided: neither module API reuses a forward strided conv's pairs (spconv asserts "only support reuse subm
    indices"), so "cached" is the conv computed on the pairs the layer stored under its indice_key: ours
    through the module's own compute step, spconv through the calls its module makes when it reuses pairs
    (``examples/lidar_spconv_twin.stored_pairs_compute``); spconv-triton has no such entry and shows "-".
Outputs are cross-checked against ours (same active sites after sorting, features within a dtype tolerance
relative to the norm), for the layer and the cached outputs. Ratio = ours / spconv (< 1: ours faster).

End to end (--e2e-spconv): examples/lidar_detector.py built once on our modules and once, through
examples/lidar_spconv_twin.py, on spconv's (same weights, checked equal), then spconv eager (what teams run
today) against ours eager, under Inductor and under hybrid_trt, fp16, "realistic" config. The mode
"hybrid_trt/no-delegates" (for --e2e-modes) is hybrid_trt with no partition delegated (min_block_size beyond
any partition): our stitching around Inductor alone, which tells the delegate's cost from the stitching's.

Times: median of --iters calls after warm-up, CUDA events around each call (host dispatch included), ms; the
sides of a ratio are timed in interleaved rounds (one call of each per round, the order rotating).
The markdown (--out) is rewritten after every case, so a run cut short keeps what it measured.

    python benchmarks/bench_sparse.py --runs 3 --out benchmarks/results/sparse_spconv_h200.md
    python benchmarks/bench_sparse.py --e2e-spconv --runs 3 --out benchmarks/results/sparse_spconv_e2e_h200.md
    python benchmarks/bench_sparse.py --cpu-smoke-test [--e2e-spconv]     # CPU, tiny, no timing value
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import pathlib
import platform
import subprocess
import sys
import time
import traceback

import torch

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples"))

import lidar_detector  # noqa: E402
from hybrid_trt.plugins.sparse import SparseConv3d, SparseConvTensor, SubMConv3d  # noqa: E402

try:
    import spconv
    import spconv.pytorch as spc

    SPCONV = f"spconv {spconv.__version__}"
except Exception as e:  # noqa: BLE001 - optional anchor; a broken install is reported, not fatal
    spc = None
    SPCONV = f"spconv not importable ({type(e).__name__}: {str(e)[:120]})"
try:
    import spconv_triton.pytorch as spt
except ImportError:  # compared only where it is installed
    spt = None
import lidar_spconv_twin as twin  # noqa: E402 - imports spconv only when called


DEVICE = "cuda"
GRID = (41, 1600, 1408)
ITERS = 30
# Norm-relative feature tolerance per dtype: a few hundred ulps of the output, far below what a wrong weight
# mapping or neighbour gives (~1).
TOL = {torch.float16: 1e-2, torch.float32: 1e-5}
DTYPES = {"fp16": torch.float16, "fp32": torch.float32}
CASES = (  # name, channels, subm, conv arguments
    ("SubM 3x3x3 C=64", 64, True, dict(kernel_size=3)),
    ("SubM 3x3x3 C=128", 128, True, dict(kernel_size=3)),
    ("strided 3x3x3 s2 C=64", 64, False, dict(kernel_size=3, stride=2, padding=1)),
)


def cuda_time_ms(fn, warmup: int = 5, iters: int | None = None) -> float:
    """Median wall time per call, measured with CUDA events around each call
    (includes host-side dispatch, which is what a model sees)."""
    iters = ITERS if iters is None else iters
    for _ in range(warmup):
        fn()
    if DEVICE == "cpu":  # smoke-test mode: wall clock
        times = []
        for _ in range(iters):
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
        return sorted(times)[len(times) // 2]
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()
    return times[len(times) // 2]


def interleaved_ms(fns: dict, warmup: int = 5, iters: int | None = None) -> tuple[dict, dict]:
    """Median ms per call of each function, timed in interleaved rounds (each
    round calls every function once, the order rotating), so that a burst of
    host or GPU noise falls on every side of a ratio alike rather than on
    whichever was timed during it. Same per-call measurement as cuda_time_ms.
    Returns (times, errors): a function that raises is dropped from the rounds
    and its error ("Type: message") reported instead of a time."""
    iters = ITERS if iters is None else iters
    times, errors = {label: [] for label in fns}, {}

    def timed(label) -> None:
        try:
            if DEVICE == "cpu":  # smoke-test mode: wall clock
                t0 = time.perf_counter()
                fns[label]()
                times[label].append((time.perf_counter() - t0) * 1e3)
                return
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fns[label]()
            end.record()
            end.synchronize()
            times[label].append(start.elapsed_time(end))
        except Exception as e:  # noqa: BLE001 - reported in its row; the other sides go on
            errors[label] = f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
            traceback.print_exc()

    for label in fns:
        for _ in range(warmup):
            if label not in errors:
                try:
                    fns[label]()
                except Exception as e:  # noqa: BLE001
                    errors[label] = f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
                    traceback.print_exc()
    if DEVICE != "cpu":
        torch.cuda.synchronize()
    for i in range(iters):
        live = [label for label in fns if label not in errors]
        for j in range(len(live)):
            timed(live[(i + j) % len(live)])
    return ({label: sorted(t)[len(t) // 2] for label, t in times.items() if t and label not in errors}, errors)


def make_cloud(n_voxels: int, channels: int, dtype, seed: int = 0):
    """A LiDAR-like cloud on GRID (examples/lidar_detector.make_inputs) with random normal features."""
    cfg = lidar_detector.DetectorConfig(grid=GRID, voxels_per_sample=n_voxels, batch_size=1)
    _, coords = lidar_detector.make_inputs(cfg, DEVICE, dtype, seed)
    g = torch.Generator(device=DEVICE).manual_seed(seed)
    feats = torch.randn((coords.shape[0], channels), generator=g, device=DEVICE, dtype=dtype)
    return feats, coords, cfg.grid


def _sorted(indices, features, spatial_shape):
    d, h, w = spatial_shape
    key = ((indices[:, 0].long() * d + indices[:, 1]) * h + indices[:, 2]) * w + indices[:, 3]
    order = torch.argsort(key)
    return indices[order], features[order]


def compare(ours, theirs, spatial_shape, dtype) -> tuple[bool, str]:
    """``ours``/``theirs`` are (indices, features) in each library's site order."""
    a_idx, a_f = _sorted(ours[0], ours[1].float(), spatial_shape)
    b_idx, b_f = _sorted(theirs[0], theirs[1].float(), spatial_shape)
    if a_idx.shape != b_idx.shape or not torch.equal(a_idx, b_idx):
        return False, f"FAIL: sites differ ({a_idx.shape[0]} vs {b_idx.shape[0]})"
    norm = b_f.norm().item()
    if norm == 0.0:
        return False, "FAIL: all-zero output (the check would be vacuous)"
    rel = (a_f - b_f).norm().item() / norm
    return rel <= TOL[dtype], f"{'ok' if rel <= TOL[dtype] else 'FAIL'} {rel:.1e}"


def _libraries():
    libs = []
    if spc is not None:
        libs.append(("spconv", spc))
    if spt is not None:
        libs.append(("spconv-triton", spt))
    return libs


def _cached_call(label, conv, y, feats, coords, subm: bool):
    """A function computing the conv on the pairs that the call which produced ``y`` stored, or None."""
    data = y.indice_dict.get(conv.indice_key)
    if data is None:
        raise RuntimeError(f"{label}: no pairs under indice_key {conv.indice_key!r} after a call")
    if subm:
        if not torch.equal(y.indices, coords):  # the input features must line up with y's sites
            raise RuntimeError(f"{label}: SubM output sites are not the input sites in input order")
        x_cached = y.replace_feature(feats)  # same sites, indice_dict holding the key
        return lambda: conv(x_cached).features
    if label == "ours":
        return lambda: conv._compute(feats, data)  # what the module runs on a rulebook it has
    if label == "spconv":
        return lambda: twin.stored_pairs_compute(conv, feats, data)
    return None  # spconv-triton: no public entry to a stored strided rulebook


def bench_case(case, n_voxels: int, dtype, seed: int, run: int) -> dict:
    name, c, subm, kw = case
    feats, coords, grid = make_cloud(n_voxels, c, dtype, seed)
    ours = (SubMConv3d if subm else SparseConv3d)(c, c, bias=False, indice_key="k", **kw)
    ours = ours.to(DEVICE, dtype).eval()
    row = {"case": name, "dtype": dtype, "requested": n_voxels, "N": coords.shape[0], "run": run}
    impls = [("ours", ours, lambda: SparseConvTensor(feats, coords, grid, 1))]
    for label, lib in _libraries():
        new_input = lambda lib=lib: lib.SparseConvTensor(feats, coords, list(grid), 1)  # noqa: E731
        impls.append((label, twin.twin_conv(ours, lib), new_input))
    outs, layer_fns, cached_fns = {}, {}, {}
    with torch.no_grad():
        for label, conv, new_input in impls:
            try:
                y = conv(new_input())
                fn = _cached_call(label, conv, y, feats, coords, subm)
                cached_f = fn() if fn is not None else None
                outs[label] = (y.indices, y.features, cached_f, tuple(y.spatial_shape))
                if label == "ours":
                    row["M"] = y.features.shape[0]
                layer_fns[label] = lambda conv=conv, new_input=new_input: conv(new_input())
                if fn is not None:
                    cached_fns[label] = fn
            except Exception as e:  # noqa: BLE001 - reported in the table, the sweep continues
                row[f"{label}_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
                traceback.print_exc()
        # Every library's layer (then cached call) in the same interleaved rounds.
        for kind, fns in (("layer", layer_fns), ("cached", cached_fns)):
            ms, errors = interleaved_ms(fns)
            for label, value in ms.items():
                row[f"{label}_{kind}"] = value
            for label, error in errors.items():
                row.setdefault(f"{label}_error", f"{kind}: {error}")
    if "ours" in outs:
        o_idx, o_f, o_cached, shape = outs["ours"]
        for label, _ in _libraries():
            if label not in outs:
                row[f"check_{label}"] = f"FAIL: {row.get(f'{label}_error', row.get('ours_error', 'not run'))}"
                continue
            t_idx, t_f, t_cached, _ = outs[label]
            ok, text = compare((o_idx, o_f), (t_idx, t_f), shape, dtype)
            if t_cached is not None:
                ok_c, text_c = compare((o_idx, o_cached), (t_idx, t_cached), shape, dtype)
                ok, text = ok and ok_c, f"layer {text}, cached {text_c}"
            row[f"check_{label}"] = text
            row[f"ok_{label}"] = ok
    return row


def layer_sweep(voxels, dtypes, runs: int, rows: list, on_row) -> None:
    total = runs * len(dtypes) * len(voxels) * len(CASES)
    t0 = time.perf_counter()
    for run in range(1, runs + 1):
        for dtype in dtypes:
            for n in voxels:
                for case in CASES:
                    seed = len(rows) + 1  # a fresh cloud and fresh features for every case
                    row = bench_case(case, n, dtype, seed, run)
                    rows.append(row)
                    on_row()
                    f = lambda k: "-" if row.get(k) is None else f"{row[k]:.3f}"  # noqa: E731
                    print(
                        f"[{len(rows)}/{total}, {time.perf_counter() - t0:.0f} s] run {run} {_dt(dtype)} "
                        f"N={row['N']} {case[0]}: ours layer {f('ours_layer')} cached {f('ours_cached')} | "
                        f"spconv layer {f('spconv_layer')} cached {f('spconv_cached')} | "
                        f"{row.get('check_spconv', 'spconv not run')}",
                        flush=True,
                    )


def _dt(dtype) -> str:
    return {v: k for k, v in DTYPES.items()}[dtype]


def _ratio(row, kind: str, lib: str = "spconv"):
    a, b = row.get(f"ours_{kind}"), row.get(f"{lib}_{kind}")
    return None if a is None or b is None else a / b


def _f(v, digits=3) -> str:
    return "-" if v is None else (f"{v:.{digits}f}" if isinstance(v, float) else str(v))


def summary_table(rows) -> list[str]:
    """One line per case, dtype and voxel count: ours/spconv per run, the worst ratio, the checks."""
    groups: dict = {}
    for r in rows:
        groups.setdefault((r["case"], _dt(r["dtype"]), r["requested"]), []).append(r)
    lines = [
        "| case | dtype | N | cached: ours/spconv per run | layer: ours/spconv per run | worst | outputs vs spconv |",
        "|---|---|---|---|---|---|---|",
    ]
    for (case, dt, _), rs in groups.items():
        cached = [_ratio(r, "cached") for r in rs]
        layer = [_ratio(r, "layer") for r in rs]
        known = [v for v in cached + layer if v is not None]
        checks = [r.get("ok_spconv") for r in rs]
        check = "ok" if checks and all(c is True for c in checks) else ("-" if spc is None else "FAIL (see rows)")
        lines.append(
            f"| {case} | {dt} | {'/'.join(str(r['N']) for r in rs)} | {', '.join(_f(v, 2) for v in cached)} "
            f"| {', '.join(_f(v, 2) for v in layer)} | {_f(max(known) if known else None, 2)} | {check} |"
        )
    return lines


def layer_markdown(rows) -> list[str]:
    lines = [
        "| case | dtype | N in | M out | run | ours cached | spconv cached | ratio | ours layer | spconv layer "
        "| ratio | spconv-triton cached | spconv-triton layer | outputs vs spconv | outputs vs spconv-triton "
        "| errors |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        errors = "; ".join(f"{k[:-6]}: {v}" for k, v in r.items() if k.endswith("_error"))
        lines.append(
            f"| {r['case']} | {_dt(r['dtype'])} | {r['N']} | {_f(r.get('M'))} | {r['run']} "
            f"| {_f(r.get('ours_cached'))} | {_f(r.get('spconv_cached'))} | {_f(_ratio(r, 'cached'), 2)} "
            f"| {_f(r.get('ours_layer'))} | {_f(r.get('spconv_layer'))} | {_f(_ratio(r, 'layer'), 2)} "
            f"| {_f(r.get('spconv-triton_cached'))} | {_f(r.get('spconv-triton_layer'))} "
            f"| {r.get('check_spconv', '-')} | {r.get('check_spconv-triton', '-')} | {errors} |"
        )
    return lines


# ---------------------------------------------------------------------------------------------- end to end


def _head_outputs(model, *inputs):
    """The detector's raw head outputs (heatmap, regression) on one call, through a hook removed afterwards (so
    neither a compiled graph nor a timed call carries it)."""
    store = {}
    handle = model.head.register_forward_hook(lambda mod, args, out: store.__setitem__("head", out))
    try:
        detections = model(*inputs)
    finally:
        handle.remove()
    return detections, tuple(t.float() for t in store["head"])


def end_to_end(config: str, dtype, modes: list[str], runs: int, rows: list, on_row) -> None:
    model = lidar_detector.build_model(config).to(DEVICE, dtype)
    feats, coords = lidar_detector.make_inputs(config, DEVICE, dtype, seed=0)
    tol = dict(atol=2e-2, rtol=2e-2) if dtype == torch.float16 else dict(atol=1e-3, rtol=1e-3)
    fns = {}
    with torch.inference_mode():
        expected, expected_heads = _head_outputs(model, feats, coords)
        for mode in modes:
            info = {"mode": mode, "N": coords.shape[0]}
            rows.append(info)
            try:
                fns[mode] = _e2e_callable(mode, model, feats, coords, expected, expected_heads, tol, info)
            except Exception as e:  # noqa: BLE001 - reported in the table, run continues
                info["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
                traceback.print_exc()
            print(info, flush=True)
            on_row()
        for run in range(1, runs + 1):
            # Interleaved rounds: a drift in the machine's speed hits every mode alike.
            timed = {mode: (lambda fn=fn: fn(feats, coords)) for mode, fn in fns.items()}
            ms, errors = interleaved_ms(timed)
            for mode in fns:
                row = {"mode": mode, "N": coords.shape[0], "run": run}
                if mode in ms:
                    row["ms"] = ms[mode]
                else:
                    row["error"] = errors.get(mode, "not timed")
                rows.append(row)
                print(row, flush=True)
            on_row()


def _e2e_callable(mode, model, feats, coords, expected, expected_heads, tol, info):
    if mode in ("spconv", "spconv-triton"):
        lib = {"spconv": spc, "spconv-triton": spt}[mode]
        if lib is None:
            raise RuntimeError(f"{mode} is not importable here" + (f" ({SPCONV})" if mode == "spconv" else ""))
        fn = twin.spconv_twin(model, lib)
        out, heads = _head_outputs(fn, feats, coords)
        info["heads_rel"] = max((a - b).norm().item() / b.norm().item() for a, b in zip(heads, expected_heads))
    elif mode == "eager":
        return model
    else:
        import hybrid_trt  # noqa: F401 - registers the backend

        torch._dynamo.reset()
        # Explicit for torch versions where fullgraph alone does not allow data-dependent output sizes.
        torch._dynamo.config.capture_dynamic_output_shape_ops = True
        # "hybrid_trt/no-delegates": our stitching with every partition left to Inductor (what placement
        # does when it moves them all), to tell the delegate's cost from the stitching's.
        backend, _, variant = mode.partition("/")
        options = {"min_block_size": 1 << 30} if variant == "no-delegates" else {}  # no partition that large
        if variant not in ("", "no-delegates") or (variant and backend != "hybrid_trt"):
            raise ValueError(f"unknown e2e mode {mode!r}")
        fn = torch.compile(model, backend=backend, fullgraph=True, options=options or None)
        t0 = time.perf_counter()
        out = fn(feats, coords)
        if DEVICE == "cuda":
            torch.cuda.synchronize()
        info["compile_s"] = time.perf_counter() - t0
        if backend == "hybrid_trt":
            report = hybrid_trt.last_report()
            print(report.table(), flush=True)
            total = report.total_op_count
            parts = sum(p.status == "delegated" for p in report.partitions)
            info["delegated"] = f"{report.delegated_op_count}/{total} ops, {parts} partition(s)"
    # A mismatch is reported in the table and the mode is still timed.
    try:
        lidar_detector.compare_detections(expected, out, **tol)
        info["matches_ours_eager"] = "ok"
    except AssertionError as e:
        info["matches_ours_eager"] = f"FAIL: {' '.join(str(e).split())[:160]}"
    if "heads_rel" in info:  # the twin: its raw heads too, relative to the norm
        heads_ok = info["heads_rel"] <= TOL[feats.dtype]
        info["matches_ours_eager"] += f"; heads {'ok' if heads_ok else 'FAIL'} {info['heads_rel']:.1e}"
    return fn


def e2e_markdown(rows, config, dtype) -> list[str]:
    setup = [r for r in rows if "run" not in r]
    timed = [r for r in rows if "run" in r]
    lines = [
        "",
        f"## End to end: examples/lidar_detector.py, {config} config, {_dt(dtype)}",
        "",
        "spconv / spconv-triton: the same model with the library's sparse modules and our weights "
        "(examples/lidar_spconv_twin.py), eager. eager / inductor / hybrid_trt: ours.",
        "",
        "| mode | active voxels | first call incl. compile (s) | matches ours eager | delegated | error |",
        "|---|---|---|---|---|---|",
    ]
    for r in setup:
        lines.append(
            f"| {r['mode']} | {r['N']} | {_f(r.get('compile_s'), 1)} | {r.get('matches_ours_eager', '-')} "
            f"| {r.get('delegated', '-')} | {r.get('error', '')} |"
        )
    modes = list(dict.fromkeys(r["mode"] for r in timed))
    runs = sorted({r["run"] for r in timed})
    if timed:
        lines += [
            "",
            "Steady state, ms (ratio to spconv eager in the same run):",
            "",
            "| run | " + " | ".join(modes) + " |",
            "|---|" + "---|" * len(modes),
        ]
        for run in runs:
            by_mode = {r["mode"]: r for r in timed if r["run"] == run}
            base = by_mode.get("spconv", {}).get("ms")
            cells = []
            for m in modes:
                ms = by_mode.get(m, {}).get("ms")
                cells.append(_f(ms) + (f" ({ms / base:.2f})" if ms is not None and base else ""))
            lines.append(f"| {run} | " + " | ".join(cells) + " |")
        ratios = []
        for run in runs:
            ms = {r["mode"]: r.get("ms") for r in timed if r["run"] == run}
            if ms.get("hybrid_trt") is not None and ms.get("spconv"):
                ratios.append(ms["hybrid_trt"] / ms["spconv"])
        if ratios:
            missed = sum(v > 0.8 for v in ratios)
            verdict = "met in every run" if not missed else f"missed in {missed} of {len(ratios)} runs"
            lines += ["", f"hybrid_trt / spconv eager per run: {', '.join(f'{v:.2f}' for v in ratios)} "
                      f"(target <= 0.80: {verdict})"]
    return lines


# ---------------------------------------------------------------------------------------------------- main


def _header(e2e: bool) -> list[str]:
    dev = torch.cuda.get_device_name() if DEVICE == "cuda" else "CPU smoke test, not a measurement"
    try:
        commit = subprocess.run(
            ["git", "-C", str(ROOT), "describe", "--always", "--dirty"], capture_output=True, text=True, timeout=10
        ).stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        commit = "unknown"
    try:
        import triton

        triton_v = triton.__version__
    except ImportError:
        triton_v = "not installed"
    try:
        import cumm

        cumm_v = f"cumm {cumm.__version__}"
    except Exception:  # noqa: BLE001
        cumm_v = "cumm not importable"
    return [
        f"# Sparse conv against spconv 2.x ({dev})",
        "",
        f"{datetime.datetime.now().isoformat(timespec='minutes')}, commit {commit}, command "
        f"`python {' '.join(sys.argv)}`. torch {torch.__version__} (CUDA {torch.version.cuda}), triton {triton_v}, "
        f"{SPCONV}, {cumm_v}, spconv-triton {'present' if spt is not None else 'not installed'}, "
        f"{_onnxruntime_version()}, Python {platform.python_version()}.",
        "",
        f"Times: median of {ITERS} calls after 5 warm-up calls, CUDA events around each call (host dispatch "
        "included), ms, the compared implementations timed in interleaved rounds (one call of each per round). "
        "Only ratios within one run mean anything.",
    ] + ([] if e2e else [
        "",
        f"Layer cases: grid {'x'.join(map(str, GRID))}, batch 1, synthetic LiDAR-like clouds "
        "(examples/lidar_detector.py), a fresh cloud and features per case. Ratio = ours / spconv (< 1: ours "
        "faster). \"cached\": SubM, the module on a tensor whose indice_dict holds its pairs; strided, the conv "
        "computed on the pairs the layer stored (no module API reuses them). Output checks: same active sites, "
        f"features within {TOL[torch.float16]:.0e} (fp16) / {TOL[torch.float32]:.0e} (fp32) of ours, relative "
        "to the norm.",
    ])


def _onnxruntime_version() -> str:
    try:
        import onnxruntime as ort
    except ImportError:
        return "onnxruntime not installed"
    return f"onnxruntime {ort.__version__} ({', '.join(ort.get_available_providers())})"


def main() -> int:
    global DEVICE, GRID, ITERS
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--voxels", default=None, help="comma list of active voxel counts (default 10000,50000,150000)")
    parser.add_argument("--dtypes", default=None, help="comma list of fp16, fp32 (default both; e2e: fp16)")
    parser.add_argument("--runs", type=int, default=3, help="repeat the whole sweep (or the e2e timing) N times")
    parser.add_argument("--iters", type=int, default=ITERS, help="timed calls per measurement (median)")
    parser.add_argument("--e2e-spconv", action="store_true", help="end to end instead of the layer sweep")
    parser.add_argument("--e2e-modes", default="spconv,spconv-triton,eager,inductor,hybrid_trt")
    parser.add_argument("--config", default=None, help="lidar_detector config for --e2e-spconv (default realistic)")
    parser.add_argument("--out", type=pathlib.Path)
    parser.add_argument(
        "--cpu-smoke-test", action="store_true",
        help="CPU, fp32, small grid and clouds, one intra-op thread (spconv's CPU build is wrong at a few sites "
        "with more); a check, not a timing",
    )
    args = parser.parse_args()
    ITERS = args.iters
    if args.cpu_smoke_test:
        DEVICE, GRID = "cpu", (41, 200, 176)
        torch.set_num_threads(1)
    elif not torch.cuda.is_available():
        print("bench_sparse.py needs a CUDA GPU (or --cpu-smoke-test)", file=sys.stderr)
        return 2
    smoke = args.cpu_smoke_test
    voxels = [int(v) for v in (args.voxels or ("2000" if smoke else "10000,50000,150000")).split(",")]
    default_dtypes = "fp32" if smoke else ("fp16" if args.e2e_spconv else "fp16,fp32")
    dtypes = [DTYPES[d] for d in (args.dtypes or default_dtypes).split(",")]
    config = args.config or ("small" if smoke else "realistic")
    modes = [m for m in args.e2e_modes.split(",") if m and not (m == "spconv-triton" and spt is None)]
    if spc is None:
        print(f"warning: {SPCONV}; the spconv columns stay empty", file=sys.stderr)
    rows: list = []

    def markdown() -> str:
        lines = _header(args.e2e_spconv)
        if args.e2e_spconv:
            lines += e2e_markdown(rows, config, dtypes[0])
        else:
            lines += ["", "## Summary", "", *summary_table(rows), "", "## Every run", "", *layer_markdown(rows)]
        return "\n".join(lines) + "\n"

    def write():
        if args.out:
            args.out.write_text(markdown())

    with contextlib.suppress(KeyboardInterrupt):
        if args.e2e_spconv:
            end_to_end(config, dtypes[0], modes, args.runs, rows, write)
        else:
            layer_sweep(voxels, dtypes, args.runs, rows, write)
    write()
    print()
    print("\n".join(e2e_markdown(rows, config, dtypes[0]) if args.e2e_spconv else summary_table(rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
