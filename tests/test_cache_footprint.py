"""What a compiling process leaves in the cache directories, in real processes: with ``cache=False`` nothing
(Inductor compiled into a fresh directory per graph and never removed it), and with the engine store's lock path
taken by a directory, a compile that still matches eager and stores its engines, with one clear warning.

Each child compiles a small model (Linear-ReLU-Linear delegated, the sigmoid left to Inductor, so Inductor
writes C++ kernels) and prints ``RESULT {...}``: whether it matched eager, the ``hybrid_trt`` warnings, and what
TORCHINDUCTOR_CACHE_DIR held before it exited."""
import json
import os
import pathlib
import subprocess
import sys

from _helpers import CHILD_WARNING_COLLECTOR

_CHILD = r"""
import json, logging, os, sys
import torch
import hybrid_trt

""" + CHILD_WARNING_COLLECTOR + r"""

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4), torch.nn.Sigmoid())
x = torch.randn(2, 8)
options = dict(json.loads(sys.argv[1]), force_inductor_ops=["aten.sigmoid"])
train = options.pop("train", False)
state = options.pop("state", False)
if state:  # a buffer the engines baked (not batch-norm statistics) changed in place: Inductor alone from then on
    model.register_buffer("scale", torch.full((4,), 2.0))
    plain_forward = model.forward
    model.forward = lambda x: plain_forward(x) * model.scale
if train:  # a graph that needs gradients: Inductor alone, forward now and backward at the first backward call
    x.requires_grad_(True)
    expected = model(x)
    expected.sum().backward()
    want_grad, x.grad = x.grad.clone(), None
    out = torch.compile(model, backend="hybrid_trt", options=options)(x)
    out.sum().backward()
    assert torch.allclose(x.grad, want_grad, rtol=1e-5, atol=1e-5)
else:
    with torch.no_grad():
        expected = model.eval()(x)
        out = torch.compile(model, backend="hybrid_trt", options=options)(x)
        if state:
            compiled = torch.compile(model, backend="hybrid_trt", options=options)
            compiled(x)
            model.scale.mul_(3.0)
            expected, out = model(x), compiled(x)
statuses = [p.status for r in hybrid_trt.reports() for p in r.partitions] or ["training graph"]
inductor = os.environ["TORCHINDUCTOR_CACHE_DIR"]
print("RESULT " + json.dumps({"matches": torch.allclose(out, expected, rtol=1e-5, atol=1e-5), "warnings": warnings,
                              "statuses": statuses, "inductor_during": sorted(os.listdir(inductor))}))
"""


def _compile_in_child(tmp_path, inductor_dir, **options) -> dict:
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(inductor_dir), HYBRID_TRT_CACHE_DIR=str(tmp_path / "store"))
    for name in ("TORCHINDUCTOR_FX_GRAPH_CACHE", "TORCHINDUCTOR_AUTOGRAD_CACHE", "TORCHINDUCTOR_FORCE_DISABLE_CACHES",
                 "HYBRID_TRT_CACHE"):
        env.pop(name, None)  # the defaults are under test
    proc = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(options)], capture_output=True, text=True,
                          env=env, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(next(line for line in proc.stdout.splitlines() if line.startswith("RESULT "))[7:])
    status = "training graph" if options.get("train") else "fell back to Inductor" if options.get("state") \
        else "delegated"  # a state change sends the graph to Inductor alone at that call, and the report says so
    assert result["matches"] and result["statuses"] == [status], result
    return result


def _tree(root: pathlib.Path) -> dict:
    return {str(p.relative_to(root)): p.read_bytes() if p.is_file() else None for p in root.rglob("*")}


def test_cache_off_leaves_nothing_in_inductors_cache_directory(tmp_path):
    inductor = tmp_path / "inductor"
    (inductor / "mine").mkdir(parents=True)  # the user's own files there stay as they are
    (inductor / "mine" / "notes.txt").write_text("the user's\n")
    before = _tree(inductor)
    result = _compile_in_child(tmp_path, inductor, cache=False)
    assert set(result["inductor_during"]) > {"mine"}, result  # Inductor did write there while the process ran
    assert _tree(inductor) == before, sorted(set(_tree(inductor)) - set(before))
    assert result["warnings"] == [] and not (tmp_path / "store").exists(), result


def test_cache_off_training_graph_leaves_nothing_either(tmp_path):
    """A graph that needs gradients goes to Inductor alone, and its backward is compiled at the first backward
    call, after the compile returned: with cache=False neither may use or fill Inductor's caches."""
    inductor = tmp_path / "inductor"
    inductor.mkdir()
    result = _compile_in_child(tmp_path, inductor, cache=False, train=True)
    assert result["inductor_during"], result  # Inductor did write there while the process ran
    assert _tree(inductor) == {}, sorted(_tree(inductor))
    # The one warning: nothing is delegated in a graph that needs gradients (and what to do for inference).
    assert len(result["warnings"]) == 1 and "needs gradients" in result["warnings"][0], result


def test_cache_off_inductor_alone_after_a_state_change_leaves_nothing_either(tmp_path):
    """A buffer the engines baked, changed in place between calls: the graph is compiled again by Inductor alone
    at that call, which with cache=False must neither use nor fill Inductor's caches."""
    inductor = tmp_path / "inductor"
    inductor.mkdir()
    result = _compile_in_child(tmp_path, inductor, cache=False, state=True)
    assert _tree(inductor) == {}, sorted(_tree(inductor))
    assert len(result["warnings"]) == 1 and "changed in place" in result["warnings"][0], result


def test_cache_on_still_fills_inductors_cache_directory(tmp_path):
    """The other side: with caching on, Inductor's entries stay where the user's TORCHINDUCTOR_CACHE_DIR says."""
    inductor = tmp_path / "inductor"
    result = _compile_in_child(tmp_path, inductor, cache=True)
    kept = {p.name for p in inductor.iterdir()}
    assert {"fxgraph", "aotautograd"} <= kept and kept == set(result["inductor_during"]), kept
    assert result["warnings"] == [], result


def test_a_directory_at_the_lock_files_path_warns_once_and_still_caches(tmp_path):
    """Every lock file of a first compile replaced by a directory, and the stored entries removed: the next
    process warned that the cache could not be written (it could) and built without the lock. Now it says
    which path is in the way and to remove it, still matches eager, and stores its engines again."""
    inductor, store = tmp_path / "inductor", tmp_path / "store"
    _compile_in_child(tmp_path, inductor, cache=True)
    locks = sorted((store / "locks").iterdir())
    assert locks, "the first compile took no lock"
    for lock in locks:
        lock.unlink()
        lock.mkdir()
    # the engines' entries (a graph manifest's key also hashes hybrid_trt's sources, which may change meanwhile)
    entries = {p.name for p in (store / "v1").glob("*/*") if not p.name.startswith("graph-")}
    assert entries, "the first compile stored no engine"
    for shard in (store / "v1").iterdir():
        for entry in shard.iterdir():
            os.rename(entry, tmp_path / f"removed-{entry.name}")
    result = _compile_in_child(tmp_path, tmp_path / "inductor2", cache=True)  # Inductor's cache cold too
    assert len(result["warnings"]) == 1, result["warnings"]
    warning = result["warnings"][0]
    assert any(str(lock) in warning for lock in locks) and "is a directory" in warning, warning
    assert "Remove that directory" in warning and "cannot write" not in warning, warning
    assert {p.name for p in (store / "v1").glob("*/*")} >= entries  # stored again
    assert all(lock.is_dir() for lock in locks)  # left for the user to remove
