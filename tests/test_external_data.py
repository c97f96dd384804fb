"""Partitions whose weights pass protobuf's 2 GB limit (delegates/external_data.py): the lowered model goes to the
delegate as a graph plus one weights file, through the engine store, a warm start and a package.

A model over 2 GB takes ~16 GB of memory and a minute on the 2-core machine, so the child processes below lower
``INLINE_LIMIT`` to 0, which sends a small model down the same path; ``test_a_model_over_2gb_is_delegated`` runs
a real one where LARGE_TESTS=1."""
from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import onnx
import pytest
import torch
from onnx import external_data_helper, helper, numpy_helper

from hybrid_trt.delegates import external_data

ROOT = pathlib.Path(__file__).resolve().parents[1]

CHILD = r"""
import json, logging, sys, time
import torch
sys.path.insert(0, sys.argv[1])
import hybrid_trt
from hybrid_trt.delegates import external_data
step, root, limit = sys.argv[2], sys.argv[3], int(sys.argv[4])
external_data.INLINE_LIMIT = limit
torch.manual_seed(0)
n = int(sys.argv[5]) if len(sys.argv) > 5 else 0
if n:  # the real thing: weights over 2 GB
    model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(n, n), torch.nn.ReLU()) for _ in range(4)],
                                torch.nn.Linear(n, 10)).eval()
    for p in model.parameters():
        p.data.normal_(0, n ** -0.5)
    x = torch.randn(2, n)
else:
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3), torch.nn.ReLU(), torch.nn.Flatten(),
                                torch.nn.Linear(16 * 6 * 6, 10)).eval()
    x = torch.randn(2, 3, 8, 8)
with torch.no_grad():
    ref = model(x)
    if step == "compile":
        out = torch.compile(model, backend="hybrid_trt", options={"cache_dir": root})(x)
        rep = hybrid_trt.last_report()
        engines = [e.source for p in rep.partitions for e in p.engines]
        delegated = rep.delegated_op_count == rep.total_op_count
    elif step == "export":
        hybrid_trt.export(model, (x,), path=root + "/pkg")
        out, engines, delegated = ref, [], True
    else:
        loaded = hybrid_trt.load(root + "/pkg")
        out, engines, delegated = loaded(x), [], True
print(json.dumps({"err": (out - ref).abs().max().item(), "engines": engines, "delegated": delegated}))
"""


def _child(step: str, root, limit: int = 0, n: int = 0, timeout: int = 600) -> dict:
    proc = subprocess.run([sys.executable, "-c", CHILD, str(ROOT), step, str(root), str(limit), str(n)],
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _model_with(*arrays) -> onnx.ModelProto:
    nodes, inits, prev = [], [], "x"
    for i, a in enumerate(arrays):
        inits.append(numpy_helper.from_array(a, f"w{i}"))
        nodes.append(helper.make_node("Add", [prev, f"w{i}"], [f"y{i}"]))
        prev = f"y{i}"
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [300])],
                              [helper.make_tensor_value_info(prev, onnx.TensorProto.FLOAT, [300])], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_a_model_within_the_limit_is_one_byte_string():
    import numpy as np
    model = _model_with(np.ones(300, np.float32))
    data, files = external_data.serialize(model, "model.onnx")
    assert files == {} and data == model.SerializeToString()


def test_weights_over_the_limit_move_to_one_aligned_file_that_onnx_reads_back(tmp_path, monkeypatch):
    import numpy as np
    monkeypatch.setattr(external_data, "INLINE_LIMIT", 0)
    rng = np.random.default_rng(0)
    big = [rng.standard_normal(300).astype(np.float32) for _ in range(3)]
    small = np.arange(3, dtype=np.float32)  # under the 1 KB threshold: stays in the graph
    model = _model_with(big[0], small, big[1], big[2])
    data, files = external_data.serialize(model, "model.onnx")
    assert list(files) == ["model.onnx.data"] and len(data) < 1000
    assert len(files["model.onnx.data"]) >= sum(a.nbytes for a in big)
    light = onnx.load_from_string(data)
    external = [t for t in light.graph.initializer if external_data_helper.uses_external_data(t)]
    assert [t.name for t in external] == ["w0", "w2", "w3"]
    assert all(int(e.value) % 64 == 0 for t in external for e in t.external_data if e.key == "offset")
    (tmp_path / "model.onnx.data").write_bytes(files["model.onnx.data"])
    external_data_helper.load_external_data_for_model(light, str(tmp_path))
    for got, want in zip(light.graph.initializer, model.graph.initializer):
        np.testing.assert_array_equal(numpy_helper.to_array(got), numpy_helper.to_array(want))
    assert model.graph.initializer[0].HasField("raw_data")  # the lowered model itself is left as it was


def test_an_onnxruntime_without_in_memory_external_data_says_what_to_install():
    class OldSessionOptions:  # onnxruntime < 1.23 has no add_external_initializers_from_files_in_memory
        pass
    external_data.add_to_session(OldSessionOptions(), {})  # nothing external: nothing asked of it
    with pytest.raises(RuntimeError, match=r"2 GB.*onnxruntime>=1.23"):
        external_data.add_to_session(OldSessionOptions(), {"model.onnx.data": b"x"})


def test_a_single_weight_of_2gib_is_refused_with_its_name():
    from hybrid_trt.lowerings.context import tensor_proto
    huge = torch.empty(2**29, dtype=torch.float32, device="meta")  # 2 GiB, never allocated
    with pytest.raises(ValueError, match=r"'fc.weight' holds 2.0 GiB"):
        tensor_proto(huge, "fc.weight")


def test_external_weights_build_store_and_load_warm_in_a_new_process(tmp_path):
    cold = _child("compile", tmp_path / "cache")
    assert cold["delegated"] and cold["engines"] == ["built"] and cold["err"] < 1e-5, cold
    entry = next(p for p in (tmp_path / "cache").rglob("meta.json") if not p.parent.name.startswith("graph-"))
    names = set(json.loads(entry.read_text())["files"])
    assert {"engine.model.onnx", "engine.model.onnx.data", "engine.optimized.onnx",
            "engine.optimized.onnx.data"} <= names, names
    warm = _child("compile", tmp_path / "cache")
    assert warm["delegated"] and warm["engines"] == ["loaded"] and warm["err"] < 1e-5, warm


def test_external_weights_travel_in_a_package(tmp_path):
    assert _child("export", tmp_path)["err"] == 0
    shipped = {p.name for p in (tmp_path / "pkg").rglob("*") if p.is_file()}
    assert any(name.endswith("optimized.onnx.data") for name in shipped), sorted(shipped)
    loaded = _child("load", tmp_path)
    assert loaded["err"] < 1e-5, loaded


@pytest.mark.skipif(os.environ.get("LARGE_TESTS") != "1",
                    reason="needs ~16 GB of memory and a few minutes: set LARGE_TESTS=1")
def test_a_model_over_2gb_is_delegated_and_loads_warm(tmp_path):
    # 4 x 12000 x 12000 float32 weights: 2.3 GB. Before external data: "Failed to serialize proto", Inductor ran it.
    cold = _child("compile", tmp_path / "cache", limit=external_data.INLINE_LIMIT, n=12000, timeout=1200)
    assert cold["delegated"] and cold["engines"] == ["built"] and cold["err"] < 1e-4, cold
    warm = _child("compile", tmp_path / "cache", limit=external_data.INLINE_LIMIT, n=12000, timeout=1200)
    assert warm["delegated"] and warm["engines"] == ["loaded"] and warm["err"] < 1e-4, warm
