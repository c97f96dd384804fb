"""Export conformance: models nobody here chose, taken through the deployment path a user ships with.

Each model (the conformance suite's cases, or any timm/torchvision classifier by name, as in conformance.py) is
exported with ``hybrid_trt.export`` at default options in one fresh process, then loaded with ``hybrid_trt.load``
in a second fresh process (no tracing, no lowering, no engine build) and called on the example input. The loaded
package's output is compared with eager PyTorch's, computed in the exporting process, with conformance.py's
comparison and tolerance. A model ``torch.export`` cannot capture (a detector's data-dependent post-processing)
is expected to be refused with an ``ExportError`` that says what to do (the row keeps its first and last lines);
its backbone, the part the message says to export, then gets a row of its own.

    python benchmarks/export_conformance.py --models timm_ghostnet_100,tv_regnet_x_400mf --out results/x.md

Rows: model, kind, input, verdict, delegated ops / total and partitions (the export's report), export s (in
its process, AOTInductor included), package MB, load s and first call ms (in the loading process), rel err.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import conformance as conf  # noqa: E402

MARKER = "@@EXPORT-CONFORMANCE@@"


def _export_worker(name: str, pkg: str, ref: str) -> dict:
    import torch
    import hybrid_trt
    name, _, part = name.partition(":")
    model, args = conf.build(conf.select(name)[0])
    if part:  # a detector's dense part, fed what the detector feeds it: its transform's image batch
        with torch.no_grad():
            args = (model.transform(*args)[0].tensors,)
        model = model.get_submodule(part)
    with torch.no_grad():
        expected = model(*args)
    torch.save({"args": args, "expected": expected}, ref)
    before = len(hybrid_trt.reports())
    t0 = time.perf_counter()
    try:
        hybrid_trt.export(model, args, path=pkg)
    except hybrid_trt.ExportError as e:
        lines = str(e).replace(str(pkg), "<package>").strip().splitlines()
        # Its first line (what failed) and its last (what to do), as the user reads them.
        return {"verdict": "refused", "detail": lines[0][:160] + ("" if len(lines) == 1 else " ... " + lines[-1][:400])}
    res = {"export_s": time.perf_counter() - t0,
           "package_mb": sum(f.stat().st_size for f in pathlib.Path(pkg).rglob("*") if f.is_file()) / 2**20}
    conf._collect_reports(res, hybrid_trt.reports()[before:])
    return res


def _load_worker(pkg: str, ref: str) -> dict:
    import torch
    import hybrid_trt
    data = torch.load(ref, weights_only=False)
    t0 = time.perf_counter()
    run = hybrid_trt.load(pkg)
    t1 = time.perf_counter()
    out = run(*data["args"])
    t2 = time.perf_counter()
    # A package returns the model's output leaves in its structure (a dict for torchvision's segmentation models).
    cmp = conf.compare(out, data["expected"], conf.TOLERANCE["float32"])
    return {"load_s": t1 - t0, "first_call_ms": (t2 - t1) * 1e3, "rel": cmp["rel"], "problem": cmp["problem"]}


def _in_fresh_process(args: list, timeout: float) -> dict:
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    try:
        p = subprocess.run([sys.executable, os.path.abspath(__file__), *args], capture_output=True, text=True,
                           timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"verdict": "FAILED", "detail": f"timed out after {timeout:.0f} s"}
    for line in p.stdout.splitlines():
        if line.startswith(MARKER):
            return json.loads(line[len(MARKER):])
    tail = (p.stderr.strip().splitlines() or ["no output"])[-1]
    return {"verdict": "FAILED", "detail": f"exit {p.returncode}: {tail[:300]}"}


def run_model(case, timeout: float, part: str = "") -> dict:
    """``part``: a submodule exported alone (a detector's backbone, what the refusal's advice says to export)."""
    name = f"{case.name}:{part}" if part else case.name
    row = {"model": name, "kind": case.kind, "input": "its transform's batch" if part else case.input}
    with tempfile.TemporaryDirectory(prefix="htrt-export-conf-") as d:
        pkg, ref = os.path.join(d, "model.pkg"), os.path.join(d, "ref.pt")
        row.update(_in_fresh_process(["--worker", "export", name, pkg, ref], timeout))
        if "verdict" in row:
            return row
        row.update(_in_fresh_process(["--worker", "load", name, pkg, ref], timeout))
    if "verdict" not in row:
        ok = row["problem"] is None and row["rel"] <= conf.TOLERANCE["float32"]
        row["verdict"] = "ok" if ok else "MISMATCH"
        row["detail"] = row["problem"] or ""
    return row


def table(rows: list) -> list[str]:
    out = ["| model | kind | input | verdict | delegated ops | partitions | export s | package MB | load s | "
           "first call ms | rel err | detail |", "|" + "---|" * 12]
    for r in rows:
        ops = f"{r['delegated_ops']}/{r['total_ops']}" if "total_ops" in r else "-"
        num = lambda k, f: format(r[k], f) if isinstance(r.get(k), (int, float)) else "-"  # noqa: E731
        out.append(f"| {r['model']} | {r['kind']} | {r['input']} | {r['verdict']} | {ops} | "
                   f"{r.get('partitions', '-')} | {num('export_s', '.1f')} | {num('package_mb', '.1f')} | "
                   f"{num('load_s', '.2f')} | {num('first_call_ms', '.1f')} | {num('rel', '.1e')} | "
                   f"{r.get('detail', '')} |")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", help="comma-separated names or globs, as conformance.py takes")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per process (export, load)")
    ap.add_argument("--note", default="")
    ap.add_argument("--out")
    ap.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        kind, name, pkg, ref = a.worker
        res = _export_worker(name, pkg, ref) if kind == "export" else _load_worker(pkg, ref)
        print(MARKER + json.dumps(res, default=str), flush=True)
        return 0
    if not (a.models and a.out):
        ap.error("--models and --out are required")
    cases = conf.select(a.models)
    rows = []
    for case in cases:
        # A detector torch.export refuses: its backbone too, the part the refusal says to export.
        for part in ("", "backbone"):
            if part and not (case.kind == "detector" and rows[-1]["verdict"] == "refused"):
                break
            t0 = time.perf_counter()
            rows.append(run_model(case, a.timeout, part))
            print(f"{rows[-1]['model']}: {rows[-1]['verdict']} ({time.perf_counter() - t0:.0f} s) "
                  f"{rows[-1].get('detail', '')}", flush=True)
    counts = {v: sum(r["verdict"] == v for r in rows) for v in ("ok", "refused", "MISMATCH", "FAILED")}
    _, desc = conf.machine("cpu")
    header = ["# Export conformance: exported in one process, loaded in another, against eager", "",
              f"- machine: {desc}", f"- commit: {conf.commit()}", f"- versions: {conf.versions()}",
              f"- run: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, `python benchmarks/export_conformance.py "
              f"--models {a.models}`",
              "- each model: `hybrid_trt.export(model, args)` at default options in a fresh process (float32, CPU), "
              "then `hybrid_trt.load` and one call in a second fresh process; match as in conformance.py "
              f"(rel err <= {conf.TOLERANCE['float32']})",
              *([f"- note: {a.note}"] if a.note else []),
              "- summary: " + ", ".join(f"{n} {v}" for v, n in counts.items() if n), ""]
    pathlib.Path(a.out).write_text("\n".join(header + table(rows)) + "\n")
    return 0 if counts["MISMATCH"] == counts["FAILED"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
