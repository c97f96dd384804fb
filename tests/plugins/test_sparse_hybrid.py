"""The SECOND/CenterPoint-style example compiled with backend="hybrid_trt" matches eager, in one graph: sparse
ops stay in the Inductor graph as extern calls (ONNX Runtime does not take their domain), the dense BEV part
goes to ONNX Runtime."""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import hybrid_trt  # noqa: E402
from examples import lidar_detector  # noqa: E402


def test_lidar_detector_hybrid_matches_eager():
    model = lidar_detector.build_model("small")
    before = len(hybrid_trt.reports())
    compiled = torch.compile(model, backend="hybrid_trt", fullgraph=True)
    with torch.inference_mode():
        for seed in (0, 1):  # a different voxel count each call
            feats, coords = lidar_detector.make_inputs("small", seed=seed)
            expected = model(feats, coords)
            got = compiled(feats, coords)
            lidar_detector.compare_detections(expected, got, atol=1e-4, rtol=1e-4)
    reports = hybrid_trt.reports()[before:]
    assert len(reports) == 1, [r.table() for r in reports]  # one graph, no recompilation per voxel count
    rep = reports[0]
    assert rep.delegated_op_count > 0, rep.table()
    sparse_left = [op for op in rep.inductor_ops if op.op.startswith("hybrid_trt.sparse")]
    assert sparse_left, rep.table()
    assert all("onnxruntime" in op.reason or "unbacked" in op.reason for op in sparse_left), rep.table()
