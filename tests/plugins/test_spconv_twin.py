"""The spconv 2.x twin (examples/lidar_spconv_twin.py) computes what our modules compute, with the same
weights: per layer type and for the small LiDAR detector end to end, on spconv's CPU build. This is what makes
the spconv comparison in benchmarks/bench_sparse.py a comparison of the same model.

Skipped where spconv is not importable (it is an optional benchmark dependency:
``pip install spconv==2.3.8 "cumm>=0.7.11,<0.8"`` for the CPU build).
"""

from __future__ import annotations

import pytest
import torch

from examples import lidar_detector
from hybrid_trt.plugins.sparse import (
    SparseConv3d,
    SparseConvTensor,
    SparseInverseConv3d,
    SparseSequential,
    SubMConv3d,
)
from sparse_dense_ref import random_cloud

try:
    import spconv.pytorch as spc
except Exception as e:  # noqa: BLE001 - a missing or broken optional install skips, with the reason
    pytest.skip(f"spconv is not importable: {type(e).__name__}: {e}", allow_module_level=True)

from examples import lidar_spconv_twin as twin  # noqa: E402

GRID = (9, 12, 10)
BATCH = 2


@pytest.fixture(autouse=True)
def one_thread():
    # spconv 2.3.8's CPU build computes wrong features at a few sites, nondeterministically, with more than one
    # intra-op thread (seen here on 2 cores, SubM 3x3x3, ~3000 sites); with one it matches a dense conv3d.
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _cloud(channels, seed=0):
    features, indices = random_cloud(BATCH, GRID, 0.12, channels, seed)
    return features, indices


def _sorted(indices, features, shape):
    d, h, w = shape
    key = ((indices[:, 0].long() * d + indices[:, 1]) * h + indices[:, 2]) * w + indices[:, 3]
    order = torch.argsort(key)
    return indices[order], features[order]


def _assert_same(ours, theirs):
    assert tuple(theirs.spatial_shape) == ours.spatial_shape
    a_idx, a_f = _sorted(ours.indices, ours.features, ours.spatial_shape)
    b_idx, b_f = _sorted(theirs.indices, theirs.features, ours.spatial_shape)
    assert torch.equal(a_idx, b_idx), "active output sites differ"
    scale = a_f.abs().max().item()
    assert scale > 0, "vacuous comparison: the output is zero"
    torch.testing.assert_close(b_f, a_f, rtol=1e-5, atol=1e-5 * scale)


# (cin, cout) differ so a swapped in/out axis cannot pass; kernels are not cubes where it matters so a permuted
# kernel axis cannot either.
LAYERS = [
    pytest.param(lambda: SubMConv3d(5, 7, 3, bias=False, indice_key="a"), id="subm3"),
    pytest.param(lambda: SubMConv3d(5, 7, (3, 1, 3), bias=False, padding=1), id="subm-3x1x3-padding"),
    pytest.param(lambda: SubMConv3d(5, 7, 3, dilation=2, bias=False), id="subm-dilated"),
    pytest.param(lambda: SparseConv3d(5, 7, 3, stride=2, padding=1, bias=False, indice_key="a"), id="strided-s2"),
    pytest.param(lambda: SparseConv3d(5, 7, (3, 1, 1), stride=(2, 1, 1), bias=False), id="strided-3x1x1-height"),
    pytest.param(lambda: SparseConv3d(5, 7, (2, 3, 1), stride=(1, 2, 2), padding=(0, 1, 0), bias=False),
                 id="strided-asymmetric"),
]


@pytest.mark.parametrize("make", LAYERS)
def test_layer_matches_ours(make):
    torch.manual_seed(0)
    ours = make().eval()
    theirs = twin.twin_conv(ours)
    assert torch.equal(theirs.weight, ours.weight)
    features, indices = _cloud(5)
    with torch.no_grad():
        _assert_same(ours(SparseConvTensor(features, indices, GRID, BATCH)),
                     theirs(spc.SparseConvTensor(features, indices, list(GRID), BATCH)))


def test_bias_is_mapped():
    # spconv's CPU build adds a bias only in training mode ("cpu don't support act and bias" in inference), and
    # ours has no training-specific behaviour, so both run in train mode here, without autograd.
    torch.manual_seed(0)
    ours = SubMConv3d(5, 7, 3, bias=True).train()
    with torch.no_grad():
        ours.bias.normal_()
    theirs = twin.twin_conv(ours)
    assert theirs.training
    features, indices = _cloud(5)
    with torch.no_grad():
        _assert_same(ours(SparseConvTensor(features, indices, GRID, BATCH)),
                     theirs(spc.SparseConvTensor(features, indices, list(GRID), BATCH)))


def test_encoder_decoder_network_matches_ours():
    """SparseSequential with BatchNorm/ReLU on features, SubM rulebook reuse and an inverse conv that reuses a
    strided conv's pairs through its indice_key; the twin takes our SparseConvTensor at its entry."""
    torch.manual_seed(0)
    net = SparseSequential(
        SubMConv3d(5, 8, 3, bias=False, indice_key="s1"), torch.nn.BatchNorm1d(8), torch.nn.ReLU(),
        SubMConv3d(8, 8, 3, bias=False, indice_key="s1"),
        SparseConv3d(8, 6, 3, stride=2, padding=1, bias=False, indice_key="down"), torch.nn.ReLU(),
        SparseInverseConv3d(6, 4, 3, indice_key="down", bias=False),
    ).eval()
    with torch.no_grad():
        net[1].running_mean.normal_()
        net[1].running_var.uniform_(0.5, 1.5)
    theirs = twin.spconv_twin(net)
    assert isinstance(theirs, spc.SparseSequential)
    features, indices = _cloud(5, seed=1)
    with torch.no_grad():
        x = SparseConvTensor(features, indices, GRID, BATCH)
        _assert_same(net(x), theirs(SparseConvTensor(features, indices, GRID, BATCH)))


def test_stored_pairs_compute_equals_the_layer():
    """bench_sparse.py times spconv's strided "cached" case through stored_pairs_compute: it must compute the
    layer's output from the pairs the layer stored (spconv's Native algorithm here; the GPU's implicit-GEMM
    branch is checked by the benchmark's own cross-check)."""
    features, indices = _cloud(5)
    for ours in (SparseConv3d(5, 7, 3, stride=2, padding=1, bias=False, indice_key="k"),
                 SubMConv3d(5, 7, 3, bias=False, indice_key="k")):
        theirs = twin.twin_conv(ours.eval())
        with torch.no_grad():
            y = theirs(spc.SparseConvTensor(features, indices, list(GRID), BATCH))
            again = twin.stored_pairs_compute(theirs, features, y.indice_dict["k"])
        torch.testing.assert_close(again, y.features, rtol=0, atol=0)


def test_lidar_detector_matches_ours_end_to_end():
    model = lidar_detector.build_model("small")
    theirs = twin.spconv_twin(model)
    # Same module tree and the same weights: the mapping is one to one.
    ours_sd, theirs_sd = model.state_dict(), theirs.state_dict()
    assert list(ours_sd) == list(theirs_sd)
    assert all(torch.equal(ours_sd[k], theirs_sd[k]) for k in ours_sd)
    assert isinstance(theirs.backbone3d.net, spc.SparseSequential)
    assert not any(isinstance(m, (SubMConv3d, SparseConv3d)) for m in theirs.modules())

    heads = {}
    for name, m in (("ours", model), ("theirs", theirs)):
        m.head.register_forward_hook(lambda mod, args, out, name=name: heads.__setitem__(name, out))
    feats, coords = lidar_detector.make_inputs("small", seed=3)
    with torch.no_grad():
        expected, got = model(feats, coords), theirs(feats, coords)
    for a, b in zip(heads["ours"], heads["theirs"]):
        assert a.abs().max() > 0.1
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-4)
    lidar_detector.compare_detections(expected, got, atol=1e-4, rtol=1e-4, min_matched=1.0)


def test_unknown_sparse_module_is_an_error():
    class GatedSubM(SubMConv3d):  # a subclass may compute something else: never mapped silently
        pass

    with pytest.raises(TypeError, match="no spconv twin for"):
        twin.spconv_twin(torch.nn.Sequential(GatedSubM(4, 4, 3)))
    with pytest.raises(ValueError, match="holds no hybrid_trt sparse modules"):
        twin.spconv_twin(torch.nn.Linear(3, 3))
