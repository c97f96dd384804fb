"""The latest GPU conformance row of every (model, dtype), gathered from the GPU results files.

    .venv/bin/python benchmarks/conformance_gpu_latest.py      # writes benchmarks/results/conformance_gpu_latest.md

The GPU rows (``conformance_h200.md``, ``conformance_h100.md``) were written run by run, as the device time of each
session allowed, so a model's rows are spread over many runs and the later ones supersede the earlier. This
script reads every table in both files, dates each row by its run (a table's own ``- run:`` line, else the date
its run is listed with at the top of the file, else its section heading's date) and keeps the latest row per
(model, dtype). It runs nothing: the rows are the ones the runs wrote, with their explanations; a row that is not
ok points to the file and run whose findings explain it.
"""
from __future__ import annotations

import argparse
import collections
import pathlib
import re
import sys

RESULTS = pathlib.Path(__file__).resolve().parent / "results"
FILES = {"conformance_h200.md": "H200", "conformance_h100.md": "H100"}
_DATE = re.compile(r"(\d{4}-\d\d-\d\d)[ ~]*(\d\d:\d\d)?")


def _date(text: str) -> str | None:
    m = _DATE.search(text)
    return None if m is None else f"{m.group(1)} {m.group(2) or '00:00'}"


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def rows_of(path: pathlib.Path, gpu: str) -> list[dict]:
    """Every table row of ``path``, each with the date, dtype and run it belongs to."""
    lines = path.read_text().splitlines()
    run_dates = {}  # "A" -> date, from the file's list of runs ("- run A: commit ... (2026-11-30 18:07 UTC)")
    for line in lines:
        m = re.match(r"- run ([A-Z]):(.*)", line)
        if m:
            run_dates[m.group(1)] = _date(m.group(2))
            for same in re.findall(r"run ([A-Z]): same tree", m.group(2)):  # "run B: same tree" as run A
                run_dates[same] = run_dates[m.group(1)]
    out, when, dtype, run, header = [], None, None, None, None
    for line in lines:
        heading = re.match(r"(#+) (.*)", line)
        if heading:
            title = heading.group(2)
            letter = re.match(r"[Rr]un ([A-Z])\b", title)
            if len(heading.group(1)) <= 2:  # a run's section (### are its lanes)
                run = title.split(":")[0].split(" (")[0]
                when = (run_dates.get(letter.group(1)) if letter and letter.group(1) in run_dates else None) \
                    or _date(title) or when
                dtype = None
            d = re.search(r"float16|float32", title)
            dtype = d.group(0) if d else dtype
            header = None
            continue
        if line.startswith("- run:"):
            when = _date(line) or when
            d = re.search(r"--dtype (\w+)", line)
            dtype = d.group(1) if d else dtype
            continue
        if line.startswith("| model |"):
            header = _cells(line)
            continue
        if header and line.startswith("| ") and not line.startswith("|---"):
            cells = _cells(line)
            if len(cells) >= len(header) and dtype and when:
                out.append({**dict(zip(header, cells)), "dtype": dtype, "when": when, "run": run, "gpu": gpu,
                            "file": path.name})
    return out


def latest(rows: list[dict]) -> dict:
    best = {}
    for r in rows:
        key = (r["model"], r["dtype"])
        if key not in best or best[key]["when"] <= r["when"]:
            best[key] = r
    return best


def _row(r: dict) -> str:
    explanation = r.get("explanation", "")
    if r.get("status") != "ok":
        explanation = (explanation[:220] + "...") if len(explanation) > 220 else explanation
        explanation += f" (explained in {r['file']}, {r['run']}, and its findings)"
    else:
        explanation = ""
    return "| " + " | ".join([r["model"], r["dtype"], r["gpu"], r["when"], r.get("status", ""),
                               r.get("match: rel err (abs)", ""), r.get("delegated / total ops", ""),
                               r.get("partitions", ""), r.get("vs eager", ""), r.get("vs Inductor", ""),
                               explanation]) + " |"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(RESULTS / "conformance_gpu_latest.md"))
    args = ap.parse_args(argv)
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
    import conformance
    suite = [c.name for c in conformance.CASES]
    rows = [r for f, gpu in FILES.items() for r in rows_of(RESULTS / f, gpu)]
    best = latest(rows)
    head = ["| model | dtype | GPU | run date (UTC) | status | match: rel err (abs) | delegated / total ops | "
            "partitions | vs eager | vs Inductor | explanation |", "|" + "---|" * 11]
    suite_rows = [best[(m, d)] for m in suite for d in ("float16", "float32") if (m, d) in best]
    missing = [f"{m} {d}" for m in suite for d in ("float16", "float32") if (m, d) not in best]
    others = sorted((r for (m, _d), r in best.items() if m not in suite), key=lambda r: (r["model"], r["dtype"]))
    count = collections.Counter(r["status"] for r in suite_rows)
    count_others = collections.Counter(r["status"] for r in others)
    text = [
        "# Conformance on CUDA: the latest row of every (model, dtype)",
        "",
        f"Generated by `benchmarks/conformance_gpu_latest.py` from {', '.join(FILES)} ({len(rows)} rows in all); "
        "nothing was run to write it. Each row is the latest one its model and dtype got, on whichever GPU "
        "was lent then (H200, or the H100 when no H200 was); the run, its commit and its conditions (lanes "
        "sharing the GPU) are in the file the row names. Statuses: ok (matches eager and is not slower than "
        "both eager and Inductor), slow (slower than both), MISMATCH, FAILED, eager fails (the model itself "
        "raises in that dtype), not run.",
        "",
        f"## The suite ({len(suite)} models, float16 and float32): "
        + ", ".join(f"{n} {s}" for s, n in count.most_common())
        + (f"; no GPU row: {', '.join(missing)}" if missing else ""),
        "",
        *head, *map(_row, suite_rows),
        "",
        f"## Other models run on a GPU: " + ", ".join(f"{n} {s}" for s, n in count_others.most_common()),
        "",
        *head, *map(_row, others),
        "",
    ]
    pathlib.Path(args.out).write_text("\n".join(text))
    print(f"wrote {args.out}: suite {dict(count)}, others {dict(count_others)}, missing {missing}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
