"""Size of an exported package, per kind of file, for one or more source trees.

    .venv/bin/python benchmarks/package_size.py [--model resnet18] [--trees before=/path/a,after=.] [--out FILE]

Each tree exports the model (``examples.models.build``) with ``hybrid_trt.export`` in a fresh process whose
``PYTHONPATH`` is that tree, then the package's files are summed by kind: the engine files (per name), the
recipe (the partition's FX module), ``model.pt2`` (AOTInductor) and the reference data. The table goes to stdout
and, with --out, to a Markdown file with the machine and the commit of this tree.
"""
from __future__ import annotations

import argparse
import collections
import os
import pathlib
import platform
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]

_CHILD = r"""
import sys, torch, hybrid_trt
from examples.models import build
torch.manual_seed(0)
model, x = build(sys.argv[1])
hybrid_trt.export(model, (x,), path=sys.argv[2])
"""


def _kind(name: str) -> str:
    base = name.rsplit("/", 1)[-1]
    if name.startswith("engines/"):
        return base if base.startswith("engine.") or base == "recipe.pt" else "store metadata"
    if base == "model.pt2":
        return "model.pt2 (AOTInductor)"
    if name.startswith("reference/"):
        return "reference data"
    return base


def sizes(tree: pathlib.Path, model: str, work: pathlib.Path) -> dict:
    out = work / tree.name.replace("/", "_")
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run([sys.executable, "-c", _CHILD, model, str(out)], env=env, cwd=tree, capture_output=True,
                          text=True, timeout=3600)
    if done.returncode != 0:
        raise RuntimeError(f"export in {tree} failed:\n{done.stderr[-3000:]}")
    by_kind: dict = collections.Counter()
    for f in out.rglob("*"):
        if f.is_file():
            by_kind[_kind(f.relative_to(out).as_posix())] += f.stat().st_size
    return dict(by_kind)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--trees", default=f"this={ROOT}", help="LABEL=PATH,... source trees to export with")
    parser.add_argument("--out", help="write the Markdown table here")
    args = parser.parse_args(argv)
    trees = [(label, pathlib.Path(path).resolve()) for label, _, path in
             (item.partition("=") for item in args.trees.split(","))]
    work = pathlib.Path(tempfile.mkdtemp(prefix="package_size_"))
    results = {label: sizes(path, args.model, work / label) for label, path in trees}
    kinds = sorted({k for r in results.values() for k in r})
    mb = 1 << 20
    lines = ["| file | " + " | ".join(f"{label} (MB)" for label, _ in trees) + " |",
             "|---|" + "---|" * len(trees)]
    for k in kinds:
        lines.append(f"| {k} | " + " | ".join(f"{results[label].get(k, 0) / mb:.2f}" for label, _ in trees) + " |")
    lines.append("| **total** | " + " | ".join(f"**{sum(results[label].values()) / mb:.2f}**" for label, _ in trees)
                 + " |")
    table = "\n".join(lines)
    print(table)
    if args.out:
        import torch
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                text=True).stdout.strip()
        header = (f"# Package size: {args.model}\n\nMachine: {platform.node()} ({platform.machine()}, "
                  f"{os.cpu_count()} CPUs, torch {torch.__version__}); commit {commit} (this tree); "
                  f"`benchmarks/package_size.py --model {args.model}`; trees: "
                  + ", ".join(f"{label} = {path}" for label, path in trees) + "\n\n")
        pathlib.Path(args.out).write_text(header + table + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
