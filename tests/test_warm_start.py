"""Warm starts: a second process with the same cache directories builds nothing (every engine loaded, Inductor's
compiled graph from its cache) and matches eager; the same model written with other Python names gets the same
content keys; and a compiled graph in Inductor's cache whose engines left the store is never used."""
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

# Each test's own store, and the test run's Inductor cache (these tests are about the store).
from test_cache_isolation import run_store_child as run_child

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _sources(result) -> list:
    return [src for p in result["partitions"] for src in p["engines"]]


def test_warm_start_builds_nothing_and_renamed_model_has_the_same_keys(tmp_path):
    cold = run_child(tmp_path, "hybrid_trt", "detector")
    assert cold["matches"] and cold["partitions"], cold["tables"]
    assert _sources(cold) and set(_sources(cold)) == {"built"}, cold["tables"]

    warm = run_child(tmp_path, "hybrid_trt", "detector")
    assert warm["matches"], warm["tables"]
    assert warm["from_inductor_cache"] == [True], warm["tables"]
    assert warm["aot_cache"].get("autograd_cache_hit") == 1, warm["aot_cache"]
    assert set(_sources(warm)) == {"loaded"} and len(_sources(warm)) == len(_sources(cold)), warm["tables"]
    assert all(s >= 0 for p in warm["partitions"] for s in p["seconds"])
    assert "loaded in" in "\n".join(warm["tables"]) and "built" not in "\n".join(warm["tables"])
    assert [p["key"] for p in warm["partitions"]] == [p["key"] for p in cold["partitions"]]
    assert warm["delegate_calls"] > 0


def test_renamed_model_gets_the_same_keys_and_engines_gone_means_no_stale_graph(tmp_path):
    first = run_child(tmp_path, "hybrid_trt", "transformer")
    assert first["aot_cache"].get("autograd_cache_saved") == 1
    renamed = run_child(tmp_path, "hybrid_trt", "renamed")  # other variable and attribute names, same weights
    assert first["matches"] and renamed["matches"]
    keys = [p["key"] for p in first["partitions"]]
    assert keys and all(keys) and [p["key"] for p in renamed["partitions"]] == keys, renamed["tables"]
    assert set(_sources(renamed)) == {"loaded"}, renamed["tables"]  # engines found by content

    for key in keys:  # evicted or deleted; Inductor's compiled graph calling them is still in its cache
        shutil.rmtree(tmp_path / "hybrid_trt" / "v1" / key[:2] / key)
    again = run_child(tmp_path, "hybrid_trt", "transformer")
    assert again["matches"] and again["from_inductor_cache"] == [False], again["tables"]
    assert "autograd_cache_hit" not in again["aot_cache"], again["aot_cache"]
    assert set(_sources(again)) == {"built"}, again["tables"]


def test_warm_start_with_symbolic_shapes_loads_each_shape(tmp_path):
    cold = run_child(tmp_path, "hybrid_trt", "dynamic")
    assert cold["matches"] and set(_sources(cold)) == {"built"} and len(_sources(cold)) == 2, cold["tables"]
    warm = run_child(tmp_path, "hybrid_trt", "dynamic")
    # (dynamic=True also gives Dynamo a graph of size arithmetic only, which Inductor's cache may skip)
    assert warm["matches"] and warm["from_inductor_cache"][-1] is True, warm["tables"]
    assert _sources(warm) == ["loaded", "loaded"], warm["tables"]  # recipe and both shapes' engines stored


def test_bounded_dynamic_dimension_gets_one_engine_for_its_range_and_a_warm_start_loads_it(tmp_path):
    """``torch._dynamo.mark_dynamic(x, 0, min=2, max=16)`` (a LiDAR frame's point count, say): the partition gets
    one engine for the range, not one per size (torch.compile used to build an engine at every new size, each
    frame's, until the per-partition bound); a warm start loads that engine and builds nothing for any size."""
    cold = run_child(tmp_path, "hybrid_trt", "bounded")
    assert cold["matches"], cold["tables"]
    delegated = [p for p in cold["partitions"] if p["status"] == "delegated"]
    assert delegated and all(p["signatures"] == ["range [2..16]x16x32"] for p in delegated), cold["tables"]
    assert set(_sources(cold)) == {"built"}, cold["tables"]

    warm = run_child(tmp_path, "hybrid_trt", "bounded")
    assert warm["matches"] and warm["from_inductor_cache"][-1] is True, warm["tables"]
    assert [p["signatures"] for p in warm["partitions"]] == [p["signatures"] for p in cold["partitions"]]
    assert set(_sources(warm)) == {"loaded"}, warm["tables"]  # three sizes called, the range engine loaded once

    # A LiDAR frame's point count differs at every start: a process whose first call has another size traces
    # another graph (Inductor compiles again), but the range engine is keyed by its own content and loads.
    other = run_child(tmp_path, "hybrid_trt", "bounded_other_first")
    assert other["matches"], other["tables"]
    assert [p["signatures"] for p in other["partitions"]] == [p["signatures"] for p in cold["partitions"]]
    assert set(_sources(other)) == {"loaded"}, other["tables"]


def test_unbounded_dynamic_dimension_keeps_engines_per_shape(tmp_path):
    """Without bounds the range is unknown (TensorRT needs one for its profile): an engine per size, as before.
    The graph key includes the declared ranges, so a bounded compile of the same model is not served these."""
    unbounded = run_child(tmp_path, "hybrid_trt", "unbounded")
    assert unbounded["matches"] and len(_sources(unbounded)) == 3, unbounded["tables"]
    assert not any(s.startswith("range") for p in unbounded["partitions"] for s in p["signatures"])
    bounded = run_child(tmp_path, "hybrid_trt", "bounded")
    assert bounded["matches"] and bounded["from_inductor_cache"][-1] is False, bounded["tables"]
    assert all(s.startswith("range") for p in bounded["partitions"] for s in p["signatures"]), bounded["tables"]


def test_an_entry_that_verifies_but_does_not_load_is_replaced(tmp_path):
    """Engine files whose checksums match but which the delegate rejects (written by a broken build, or a
    delegate upgrade the key does not see): the entry was rebuilt in memory by every process and never replaced,
    so warm starts never recovered. Now it is removed (one warning), rebuilt and stored: the next process loads."""
    import hashlib
    import json
    cold = run_child(tmp_path, "hybrid_trt", "detector")
    assert cold["matches"] and set(_sources(cold)) == {"built"}, cold["tables"]
    damaged = 0
    for meta_path in (tmp_path / "hybrid_trt" / "v1").glob("*/*/meta.json"):
        meta = json.loads(meta_path.read_text())
        if meta.get("kind") != "static":
            continue
        for name in [n for n in meta["files"] if n.startswith("engine.") and n.endswith(".onnx")]:
            data = b"not an onnx model"
            (meta_path.parent / name).write_bytes(data)
            meta["files"][name] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
            damaged += 1
        meta_path.write_text(json.dumps(meta))
    assert damaged
    rebuilt = run_child(tmp_path, "hybrid_trt", "detector")
    assert rebuilt["matches"] and "built" in _sources(rebuilt), rebuilt["tables"]
    warm = run_child(tmp_path, "hybrid_trt", "detector")
    assert warm["matches"] and set(_sources(warm)) == {"loaded"}, warm["tables"]


_WARNS_CHILD = r"""
import sys, torch, torch.nn as nn, hybrid_trt
from hybrid_trt.delegates.onnxruntime_delegate import OnnxRuntimeDelegate
torch.manual_seed(0)
if sys.argv[1] == "bfloat16":
    model, x = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Conv2d(8, 8, 3)).eval().bfloat16(), \
        torch.randn(1, 3, 16, 16, dtype=torch.bfloat16)
else:  # every build fails: the partition falls back, and the graph is cached so
    def broken(*args, **kwargs):
        raise RuntimeError("injected build failure")
    OnnxRuntimeDelegate.build = broken
    model, x = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Conv2d(8, 8, 3)).eval(), torch.randn(1, 3, 16, 16)
with torch.no_grad():
    torch.testing.assert_close(torch.compile(model, backend="hybrid_trt")(x), model(x), rtol=1e-2, atol=1e-2)
print("WARM", hybrid_trt.last_report().from_graph_manifest)
"""


@pytest.mark.parametrize("case,warning", [("bfloat16", "no op delegated (3 of 3 declined: onnxruntime: dtype "
                                                       "bfloat16 not supported)"),
                                          ("build_fails", "Inductor: onnxruntime build failed: injected build failure")])
def test_a_warm_start_warns_as_the_compile_it_loads(tmp_path, case, warning):
    """A bfloat16 model's "no op delegated" warning (and a partition's fallback) appeared in the process that
    compiled it, and never again in the processes its cache served: a silent fallback after a restart."""
    env = {**os.environ, "HYBRID_TRT_CACHE_DIR": str(tmp_path / "store"), "PYTHONPATH": str(ROOT)}
    runs = [subprocess.run([sys.executable, "-c", _WARNS_CHILD, case], env=env, capture_output=True, text=True,
                           timeout=600) for _ in range(2)]
    for run, warm in zip(runs, ("False", "True")):
        assert run.returncode == 0, run.stderr[-3000:]
        assert f"WARM {warm}" in run.stdout, run.stdout
        assert run.stderr.count(warning) == 1, run.stderr[-3000:]
    if case == "build_fails":
        assert "runs on Inductor, as when this graph was compiled and cached" in runs[1].stderr, runs[1].stderr
