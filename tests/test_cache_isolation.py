"""Inductor's on-disk caches are on for hybrid_trt, and a hybrid graph and a plain-Inductor graph of the same
model are never served each other's entry. Each compile runs in a fresh process (tests/cache_child.py) against
shared, initially empty TORCHINDUCTOR_CACHE_DIR and hybrid_trt cache directories, like a restarted service."""
import json
import os
import pathlib
import subprocess
import sys

CHILD = pathlib.Path(__file__).with_name("cache_child.py")


def run_child(tmp_path, backend: str, model: str, fresh_inductor: bool = True) -> dict:
    """``fresh_inductor``: Inductor's cache directory is the test's own, empty at its first child (what this file
    checks); False leaves it the test run's (conftest.py), where the C++ Inductor compiled for earlier tests is
    found again. A hybrid graph's entries there are tied to this test's own store, so none is served across tests."""
    env = dict(os.environ, HYBRID_TRT_CACHE_DIR=str(tmp_path / "hybrid_trt"))
    if fresh_inductor:
        env["TORCHINDUCTOR_CACHE_DIR"] = str(tmp_path / "inductor")
    for name in ("TORCHINDUCTOR_FX_GRAPH_CACHE", "TORCHINDUCTOR_AUTOGRAD_CACHE", "TORCHINDUCTOR_FORCE_DISABLE_CACHES",
                 "HYBRID_TRT_CACHE"):
        env.pop(name, None)  # the defaults are under test
    proc = subprocess.run([sys.executable, str(CHILD), backend, model], capture_output=True, text=True, env=env,
                          timeout=900, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-4000:]
    line = next(line for line in proc.stdout.splitlines() if line.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


def run_store_child(tmp_path, backend: str, model: str) -> dict:
    """A fresh process against this test's store, with the test run's Inductor cache (warm-start tests: the C++
    Inductor compiled for earlier tests is found again; their hybrid graphs are tied to their own store)."""
    return run_child(tmp_path, backend, model, fresh_inductor=False)


def _delegated(result) -> list:
    return [p for p in result["partitions"] if p["status"] == "delegated"]


def test_plain_inductor_first_then_hybrid_still_delegates(tmp_path):
    plain = run_child(tmp_path, "inductor", "transformer")
    assert plain["matches"] and plain["aot_cache"].get("autograd_cache_saved") == 1, plain
    hybrid = run_child(tmp_path, "hybrid_trt", "transformer")
    assert hybrid["matches"], hybrid
    assert _delegated(hybrid) and hybrid["delegate_calls"] > 0, hybrid["tables"]
    assert hybrid["from_inductor_cache"] == [False], hybrid["tables"]
    assert "autograd_cache_hit" not in hybrid["aot_cache"], hybrid["aot_cache"]


def test_hybrid_first_then_plain_inductor_calls_no_delegate(tmp_path):
    hybrid = run_child(tmp_path, "hybrid_trt", "transformer")
    assert hybrid["matches"] and _delegated(hybrid), hybrid["tables"]
    assert hybrid["aot_cache"].get("autograd_cache_saved") == 1, hybrid["aot_cache"]  # the caches are on
    plain = run_child(tmp_path, "inductor", "transformer")
    assert plain["matches"], plain
    assert plain["delegate_calls"] == 0, plain
    assert "autograd_cache_hit" not in plain["aot_cache"] and "fxgraph_cache_hit" not in plain["fx_cache"], plain
