"""torch.compile captures sparse models whole (no graph break) and the
compiled model matches eager, also when the voxel count changes."""

from __future__ import annotations

import pathlib
import sys

import pytest
import torch
from torch import nn

from hybrid_trt.plugins.sparse import (
    SparseConv3d,
    SparseConvTensor,
    SparseInverseConv3d,
    SparseSequential,
    SubMConv3d,
)
from sparse_dense_ref import random_cloud

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "examples"))
import lidar_detector  # noqa: E402

SPARSE_OPS = {
    "sparse_rulebook_subm_ordered",
    "sparse_rulebook_strided",
    "sparse_rulebook_transpose",
    "sparse_rulebook_order",
    "sparse_conv_compute",
}


class UNetish(nn.Module):
    """Down and back up with a shared rulebook; output is the dense grid."""

    def __init__(self, shape, batch):
        super().__init__()
        self.shape, self.batch = shape, batch
        self.net = SparseSequential(
            SubMConv3d(3, 8, 3, indice_key="s0"), nn.BatchNorm1d(8), nn.ReLU(),
            SparseConv3d(8, 8, 3, stride=2, padding=1, indice_key="down"), nn.ReLU(),
            SubMConv3d(8, 8, 3, indice_key="s1"),
            SparseInverseConv3d(8, 4, 3, indice_key="down"),
            SubMConv3d(4, 4, 3, indice_key="s0"),
        )

    def forward(self, features, indices):
        y = self.net(SparseConvTensor(features, indices, self.shape, self.batch))
        return y.dense()


@pytest.fixture(autouse=True)
def _allow_dynamic_output_ops():
    # fullgraph=True implies this on recent torch; older versions need it set.
    with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True):
        yield


def _graphs(model, *args, fullgraph):
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    out = torch.compile(model, backend=backend, fullgraph=fullgraph)(*args)
    return graphs, out


def _sparse_targets(gm):
    return {
        str(n.target).split(".")[1]
        for n in gm.graph.nodes
        if n.op == "call_function" and str(n.target).startswith("hybrid_trt.sparse")
    }


@pytest.fixture
def clouds():
    return [random_cloud(2, (8, 10, 9), d, 3, seed=s) for s, d in ((0, 0.1), (1, 0.2))]


def test_one_graph_without_fullgraph_when_dynamic_outputs_allowed(clouds):
    model = UNetish((8, 10, 9), 2).eval()
    with torch.no_grad():
        graphs, out = _graphs(model, *clouds[0], fullgraph=False)
        expected = model(*clouds[0])
    assert len(graphs) == 1
    assert _sparse_targets(graphs[0]) == SPARSE_OPS
    torch.testing.assert_close(out, expected)


def test_inductor_matches_eager_across_voxel_counts(clouds):
    torch.manual_seed(0)
    model = UNetish((8, 10, 9), 2).eval()
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="inductor", fullgraph=True)
    with torch.no_grad():
        for features, indices in clouds:
            torch.testing.assert_close(compiled(features, indices), model(features, indices), atol=1e-5, rtol=1e-5)


def test_lidar_detector_is_one_graph_and_matches_eager():
    model = lidar_detector.build_model("small")
    feats, coords = lidar_detector.make_inputs("small", seed=0)
    with torch.inference_mode():
        graphs, _ = _graphs(model, feats, coords, fullgraph=True)
        assert len(graphs) == 1
        # No inverse conv: no transposed map, whose row order is the one built on its own.
        assert _sparse_targets(graphs[0]) == SPARSE_OPS - {"sparse_rulebook_transpose", "sparse_rulebook_order"}
        torch._dynamo.reset()
        compiled = torch.compile(model, backend="aot_eager", fullgraph=True)
        for seed in (0, 1):
            feats, coords = lidar_detector.make_inputs("small", seed=seed)
            expected = model(feats, coords)
            boxes, scores, labels = compiled(feats, coords)
            assert boxes.shape == (2, model.cfg.top_k, 7) and scores.shape == (2, model.cfg.top_k)
            assert torch.isfinite(boxes).all()
            lidar_detector.compare_detections(expected, (boxes, scores, labels), atol=1e-4, rtol=1e-4)


def test_make_inputs_is_deterministic_and_unique():
    cfg = lidar_detector.CONFIGS["small"]
    f1, c1 = lidar_detector.make_inputs("small", seed=3)
    f2, c2 = lidar_detector.make_inputs("small", seed=3)
    assert torch.equal(c1, c2) and torch.equal(f1, f2)
    assert c1.dtype == torch.int32 and c1.shape[1] == 4 and f1.shape == (c1.shape[0], 4)
    assert torch.unique(c1, dim=0).shape[0] == c1.shape[0]
    assert (c1[:, 1:] >= 0).all() and (c1[:, 1:] < torch.tensor(cfg.grid, dtype=torch.int32)).all()
    assert c1.shape[0] == cfg.batch_size * cfg.voxels_per_sample


def test_compare_detections_accepts_cutoff_swaps_and_rejects_wrong_boxes():
    g = torch.Generator().manual_seed(0)
    k = 20
    boxes = torch.rand((1, k, 7), generator=g) * torch.tensor([70.0, 80.0, 2.0, 4.0, 2.0, 2.0, 3.0]) \
        - torch.tensor([0.0, 40.0, 1.0, 0.0, 0.0, 0.0, 1.5])
    scores = torch.linspace(0.9, 0.5, k)[None]
    labels = torch.zeros((1, k), dtype=torch.long)
    reference = (boxes, scores, labels)
    # The last detection swapped for another peak of equal score (a tie at the top-k cut-off): accepted.
    swapped = boxes.clone()
    swapped[0, -1, :2] += 30.0
    lidar_detector.compare_detections(reference, (swapped, scores, labels), atol=1e-4, rtol=1e-4)
    # Two of twenty detections elsewhere: only 90% pair up, still accepted; three are not.
    swapped[0, -2, :2] += 30.0
    lidar_detector.compare_detections(reference, (swapped, scores, labels), atol=1e-4, rtol=1e-4)
    swapped[0, -3, :2] += 30.0
    with pytest.raises(AssertionError, match="pair up"):
        lidar_detector.compare_detections(reference, (swapped, scores, labels), atol=1e-4, rtol=1e-4)
    # Same centres but a wrong size: rejected.
    wrong = boxes.clone()
    wrong[0, 3, 3] += 1.0
    with pytest.raises(AssertionError, match="not close"):
        lidar_detector.compare_detections(reference, (wrong, scores, labels), atol=1e-4, rtol=1e-4)
    # Wrong scores: rejected.
    with pytest.raises(AssertionError, match="not close"):
        lidar_detector.compare_detections(reference, (boxes, scores.flip(1), labels), atol=1e-4, rtol=1e-4)


def test_without_fullgraph_the_ops_own_python_is_never_compiled(recwarn):
    """Without fullgraph (and without capture_dynamic_output_shape_ops), the graph breaks at each strided rulebook
    and the op runs eagerly; Dynamo then compiled the op's Python implementation as user code (21 graphs for a
    4-layer net, pieces of the rulebook sent to ONNX Runtime, and torch's lru_cache warning)."""
    import hybrid_trt
    torch.manual_seed(0)
    model = UNetish((6, 7, 8), 2).eval()
    features, indices = random_cloud(2, (6, 7, 8), 0.2, 3, seed=0)
    seen = []

    def backend(gm, example_inputs):
        seen.append(gm)
        return hybrid_trt.hybrid_trt_backend(gm, example_inputs)

    torch._dynamo.reset()
    with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=False), torch.no_grad():
        out = torch.compile(model, backend=backend)(features, indices)
        torch.testing.assert_close(out, model(features, indices))
    traced_from = {n.meta.get("stack_trace", "") for gm in seen for n in gm.graph.nodes}
    inside = [t for t in traced_from if "plugins/sparse/ops.py" in t or "plugins/sparse/reference.py" in t]
    assert seen and not inside, inside[:1]
    assert not [w for w in recwarn if "lru_cache" in str(w.message)]
