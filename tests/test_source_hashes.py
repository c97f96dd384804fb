"""Inductor's cache key hashes torch's installed sources once per process (``codecache.torch_key``). With caching
on, the backend has torch compute it in torch's worker thread (``prefetch``) while it loads engines, and waits
for it before returning; a warm start of a graph called directly needs no Inductor and hashes nothing. Checked in a fresh process, where nothing has computed it yet."""
import json
import os
import pathlib
import subprocess
import sys

import pytest
from torch._inductor import codecache

ROOT = pathlib.Path(__file__).resolve().parents[1]

CHILD = r"""
import json, sys, threading, time
import torch
sys.path.insert(0, sys.argv[1])
import hybrid_trt
import hybrid_trt.backend as backend
from torch._inductor import codecache
from examples.models import build

hashes, keys = [], []
original_build, original_graph_key = codecache.build_code_hash, backend.graph_key

def recording_build(roots, prefix, hasher):  # torch_key's walk over torch's sources (recursive: top call only)
    top = prefix == ""
    start = time.perf_counter()
    out = original_build(roots, prefix, hasher)
    if top:
        hashes.append({"main": threading.current_thread() is threading.main_thread(), "start": start,
                       "end": time.perf_counter()})
    return out

def recording_graph_key(*args, **kwargs):
    keys.append({"start": time.perf_counter()})
    return original_graph_key(*args, **kwargs)

codecache.build_code_hash, backend.graph_key = recording_build, recording_graph_key
torch.manual_seed(0)
model, x = build(sys.argv[3], small=True)
with torch.no_grad():
    expected = model(x)
    out = torch.compile(model, backend="hybrid_trt", options={"cache": sys.argv[2] == "on"})(x)
    returned = time.perf_counter()
print("RESULT " + json.dumps({"hashes": hashes, "keys": keys, "returned": returned,
                              "per_call": [r.per_call for r in hybrid_trt.reports()],
                              "from_graph_manifest": [r.from_graph_manifest for r in hybrid_trt.reports()],
                              "matches": all(torch.allclose(a, b, rtol=1e-4, atol=1e-4) for a, b in
                                             zip(torch.utils._pytree.tree_leaves(out),
                                                 torch.utils._pytree.tree_leaves(expected)))}))
"""


def _child(tmp_path, cache: str, model: str = "resnet18") -> dict:
    # Inductor's cache is the test run's (its compiled C++ found again); the graphs are tied to this test's store.
    env = dict(os.environ, HYBRID_TRT_CACHE_DIR=str(tmp_path / "hybrid_trt"), OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, "-c", CHILD, str(ROOT), cache, model], env=env, capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    line = next(line for line in proc.stdout.splitlines() if line.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


@pytest.mark.skipif(not callable(getattr(codecache.torch_key, "prefetch", None)),
                    reason="this torch's torch_key has no prefetch (torch 2.14 has): hashed at the lookup as before")
@pytest.mark.parametrize("model", ["resnet18", "detector"])
def test_source_hashes_run_beside_the_backend_and_are_done_when_it_returns(tmp_path, model):
    """resnet18 is delegated whole and called directly: its warm start never consults Inductor, so nothing is
    hashed. The detector keeps ops with Inductor, whose cache is looked up warm too."""
    for run in ("cold", "warm"):  # the cold process fills the caches; the warm one is served by them
        result = _child(tmp_path, "on", model)
        assert result["matches"], run
        assert len(result["keys"]) == 1, (run, result)
        if run == "warm":  # served by the stored manifest (fails if hybrid_trt's source changed in between)
            assert all(result["from_graph_manifest"]), result
        if run == "warm" and result["per_call"] == ["direct"]:
            assert model == "resnet18" and result["hashes"] == [], result
            continue
        assert model == "detector" or run == "cold", result  # resnet18 must be called directly when warm
        assert len(result["hashes"]) == 1, (run, result)
        torch_hash = result["hashes"][0]
        assert not torch_hash["main"], f"{run}: torch's sources were hashed on the main thread, after our work"
        assert torch_hash["end"] <= result["returned"], run  # waited for: nothing of the compile left running


def test_without_caching_nothing_is_hashed_in_the_background(tmp_path):
    result = _child(tmp_path, "off")
    assert result["matches"] and not result["keys"]
    # No background hashing that Inductor would not need (torch 2.14's Inductor hashes nothing with its caches off;
    # whatever a later one hashes on its own runs on the main thread).
    assert all(h["main"] for h in result["hashes"]), result["hashes"]
