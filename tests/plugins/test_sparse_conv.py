"""Sparse conv ops and modules (CPU torch implementations) against dense
conv3d / conv_transpose3d evaluated on the densified input."""

from __future__ import annotations

import pytest
import torch

from hybrid_trt.plugins.sparse import (
    SparseConv3d,
    SparseConvTensor,
    SparseInverseConv3d,
    SparseSequential,
    SubMConv3d,
)
from hybrid_trt.plugins.sparse import ops
from sparse_dense_ref import inverse_ref, random_cloud, strided_ref, subm_ref

ATOL = 1e-4

# (batch, spatial_shape, density): ordinary, dense-ish, one voxel, empty.
CLOUDS = [
    pytest.param(2, (7, 9, 8), 0.08, id="sparse"),
    pytest.param(1, (5, 6, 7), 0.45, id="dense"),
    pytest.param(3, (6, 5, 4), 0.0, id="empty"),
]


def _single_voxel_cloud(channels):
    indices = torch.tensor([[1, 3, 0, 4]], dtype=torch.int32)  # batch 1 of 2, on the y=0 face
    features = torch.linspace(-1.0, 1.0, channels).reshape(1, channels)
    return features, indices, 2, (5, 4, 6)


def _cloud(batch, shape, density, channels, seed):
    features, indices = random_cloud(batch, shape, density, channels, seed)
    return features, indices, batch, shape


def _all_clouds(channels, seed):
    for p in CLOUDS:
        batch, shape, density = p.values
        yield p.id, _cloud(batch, shape, density, channels, seed)
    yield "single", _single_voxel_cloud(channels)


def _sort_rows(indices, features):
    keys = ((indices[:, 0].long() * 1000 + indices[:, 1]) * 1000 + indices[:, 2]) * 1000 + indices[:, 3]
    order = torch.argsort(keys)
    return indices[order], features[order]


@pytest.mark.parametrize(
    "kernel_size,dilation",
    [(1, 1), (3, 1), (3, 2), ((3, 1, 3), 1), (5, 1), (2, 1), ((1, 3, 5), (1, 2, 1))],
)
def test_subm_matches_dense(kernel_size, dilation):
    torch.manual_seed(0)
    conv = SubMConv3d(5, 7, kernel_size, dilation=dilation)
    for name, (features, indices, batch, shape) in _all_clouds(5, seed=1):
        x = SparseConvTensor(features, indices, shape, batch)
        with torch.no_grad():
            y = conv(x)
        expected = subm_ref(features, indices, shape, batch, conv.weight, conv.bias, kernel_size, dilation)
        assert y.indices is indices, name
        assert y.features.shape == (indices.shape[0], 7), name
        torch.testing.assert_close(y.features.double(), expected, atol=ATOL, rtol=1e-4, msg=name)


STRIDED = [
    # kernel_size, stride, padding, dilation
    (3, 2, 1, 1),
    (3, 2, 0, 1),
    (2, 2, 0, 1),
    ((3, 3, 1), (2, 2, 1), (1, 1, 0), 1),
    (3, 1, 0, 1),
    (3, 1, 1, 2),
    ((1, 3, 3), (1, 2, 2), (0, 1, 1), 1),
    (3, 3, 2, 1),
]


@pytest.mark.parametrize("kernel_size,stride,padding,dilation", STRIDED)
def test_strided_matches_dense(kernel_size, stride, padding, dilation):
    torch.manual_seed(0)
    conv = SparseConv3d(4, 6, kernel_size, stride=stride, padding=padding, dilation=dilation)
    for name, (features, indices, batch, shape) in _all_clouds(4, seed=2):
        x = SparseConvTensor(features, indices, shape, batch)
        with torch.no_grad():
            y = conv(x)
        exp_idx, exp_feat, exp_shape = strided_ref(
            features, indices, shape, batch, conv.weight, conv.bias, kernel_size, stride, padding, dilation
        )
        assert y.spatial_shape == exp_shape, name
        got_idx, got_feat = _sort_rows(y.indices, y.features)
        assert got_idx.dtype == torch.int32
        assert torch.equal(got_idx, exp_idx), name
        torch.testing.assert_close(got_feat.double(), exp_feat, atol=ATOL, rtol=1e-4, msg=name)
        # dense() must agree with the dense conv on the whole output grid.
        assert y.dense().shape == (batch, 6, *exp_shape)


@pytest.mark.parametrize("kernel_size,stride,padding,dilation", STRIDED[:4] + STRIDED[6:])
def test_inverse_matches_conv_transpose(kernel_size, stride, padding, dilation):
    torch.manual_seed(0)
    down = SparseConv3d(3, 6, kernel_size, stride=stride, padding=padding, dilation=dilation, indice_key="d")
    up = SparseInverseConv3d(6, 4, kernel_size, indice_key="d")
    for name, (features, indices, batch, shape) in _all_clouds(3, seed=3):
        x = SparseConvTensor(features, indices, shape, batch)
        with torch.no_grad():
            mid = down(x)
            y = up(mid)
        assert y.indices is indices and y.spatial_shape == tuple(shape), name
        expected = inverse_ref(
            mid.features, mid.indices, mid.spatial_shape, batch, up.weight, up.bias,
            indices, shape, kernel_size, stride, padding, dilation,
        )
        torch.testing.assert_close(y.features.double(), expected, atol=ATOL, rtol=1e-4, msg=name)


def test_indice_key_reuses_rulebooks(monkeypatch):
    calls = {"subm": 0, "transpose": 0}
    real_subm, real_t = ops.sparse_rulebook_subm_ordered, ops.sparse_rulebook_transpose

    def count(name, fn):
        def wrapped(*a, **k):
            calls[name] += 1
            return fn(*a, **k)
        return wrapped

    monkeypatch.setattr(ops, "sparse_rulebook_subm_ordered", count("subm", real_subm))
    monkeypatch.setattr(ops, "sparse_rulebook_transpose", count("transpose", real_t))
    torch.manual_seed(0)
    net = SparseSequential(
        SubMConv3d(2, 4, 3, indice_key="s0"),
        torch.nn.ReLU(),
        SubMConv3d(4, 4, 3, indice_key="s0"),
        SparseConv3d(4, 8, 3, stride=2, padding=1, indice_key="down"),
        SparseInverseConv3d(8, 4, 3, indice_key="down"),
        SubMConv3d(4, 4, 3, indice_key="s0"),
    )
    features, indices = random_cloud(2, (6, 6, 6), 0.1, 2, seed=4)
    x = SparseConvTensor(features, indices, (6, 6, 6), 2)
    with torch.no_grad():
        y = net(x)
    assert calls == {"subm": 1, "transpose": 1}
    assert set(x.indice_dict) == {"s0", "down", "down/inverse"}
    assert y.indice_dict is x.indice_dict
    assert x.indice_dict["s0"].nbr.shape == (indices.shape[0], 27)


def test_subm_rulebook_is_symmetric_and_centred():
    features, indices = random_cloud(2, (6, 7, 5), 0.2, 1, seed=5)
    nbr = ops.sparse_rulebook_subm(indices, [6, 7, 5], [3, 3, 3], [1, 1, 1])
    n = indices.shape[0]
    assert torch.equal(nbr[:, 13], torch.arange(n, dtype=torch.int32))
    # If j is i's neighbour at offset k then i is j's at the mirrored offset.
    i, k = (nbr >= 0).nonzero(as_tuple=True)
    j = nbr[i, k].long()
    assert torch.equal(nbr[j, 26 - k].long(), i)


def test_fp16_close_to_fp32():
    torch.manual_seed(0)
    conv = SubMConv3d(16, 16, 3)
    features, indices = random_cloud(1, (8, 8, 8), 0.2, 16, seed=6)
    with torch.no_grad():
        y32 = conv(SparseConvTensor(features, indices, (8, 8, 8), 1)).features
        conv16 = SubMConv3d(16, 16, 3)
        conv16.load_state_dict(conv.state_dict())
        conv16.half()
        y16 = conv16(SparseConvTensor(features.half(), indices, (8, 8, 8), 1)).features
    assert y16.dtype == torch.float16
    torch.testing.assert_close(y16.float(), y32, atol=2e-2, rtol=2e-2)


def test_dense_scatters_features():
    features, indices = random_cloud(2, (3, 4, 5), 0.3, 3, seed=7)
    x = SparseConvTensor(features, indices, (3, 4, 5), 2)
    d = x.dense()
    assert d.shape == (2, 3, 3, 4, 5)
    i = indices.long()
    torch.testing.assert_close(d.permute(0, 2, 3, 4, 1)[i[:, 0], i[:, 1], i[:, 2], i[:, 3]], features)
    assert d.abs().sum() == pytest.approx(features.abs().sum().item(), rel=1e-5)
    assert x.dense(channels_first=False).shape == (2, 3, 4, 5, 3)


def test_user_errors_say_what_to_do():
    features, indices = random_cloud(1, (4, 4, 4), 0.3, 3, seed=8)
    x = SparseConvTensor(features, indices, (4, 4, 4), 1)
    with pytest.raises(ValueError, match="in_channels=5"):
        SubMConv3d(5, 2, 3)(x)
    with pytest.raises(KeyError, match="run the matching SparseConv3d"):
        SparseInverseConv3d(3, 2, 3, indice_key="missing")(x)
    with pytest.raises(ValueError, match="leaves no output"):
        SparseConv3d(3, 2, 5, stride=2)(x)
    with pytest.raises(ValueError, match=r"\[N, 4\]"):
        SparseConvTensor(features, indices[:, :3], (4, 4, 4), 1)
    SubMConv3d(3, 2, 3, indice_key="k")(x)
    with pytest.raises(ValueError, match="its own indice_key"):
        SubMConv3d(3, 2, 5, indice_key="k")(x)


def test_bad_inputs_a_review_found_are_errors():
    """Each was accepted silently (or failed later with an IndexError): rows that do not pair up, integer features
    (truncated outputs), a SubM key reused after a strided conv changed the sites (a stale rulebook), an inverse conv
    on a tensor that is not its conv's output, and one input tensor run twice (named as "another layer")."""
    features, indices = random_cloud(1, (6, 6, 6), 0.2, 4, seed=3)
    with pytest.raises(ValueError, match="features and indices have different numbers of rows"):
        SparseConvTensor(torch.randn(5, 4), indices[:2], (6, 6, 6), 1)
    with pytest.raises(TypeError, match="floating-point"):
        SparseConvTensor(features.long(), indices, (6, 6, 6), 1)
    x = SparseConvTensor(features, indices, (6, 6, 6), 1)
    net = SparseSequential(SubMConv3d(4, 4, 3, indice_key="s"), SparseConv3d(4, 4, 3, padding=1, indice_key="d"),
                           SubMConv3d(4, 4, 3, indice_key="s"))
    with pytest.raises(ValueError, match="already used by a SubMConv3d on other active sites"):
        net(x)
    x = SparseConvTensor(features, indices, (6, 6, 6), 1)
    down = SparseConv3d(4, 4, 3, stride=2, padding=1, indice_key="down")
    down(x)
    with pytest.raises(ValueError, match="not on the output sites of the SparseConv3d under indice_key 'down'"):
        SparseInverseConv3d(4, 4, 3, indice_key="down")(x)
    with pytest.raises(ValueError, match="make a new SparseConvTensor for each call"):
        down(x)
    # the usual flow still holds: conv, SubM on its sites, inverse back
    y = SubMConv3d(4, 4, 3, indice_key="low")(down(SparseConvTensor(features, indices, (6, 6, 6), 1)))
    assert SparseInverseConv3d(4, 4, 3, indice_key="down")(y).features.shape == features.shape


@pytest.mark.parametrize("row,problem", [((0, 6, 0, 0), r"outside batch_size=1 and spatial_shape=\(6, 6, 6\)"),
                                         ((0, 0, -1, 2), "outside"), ((1, 0, 0, 0), "outside batch_size=1"),
                                         (None, "appears 2 times")])
def test_check_names_sites_outside_the_grid_or_batch_and_duplicates(row, problem):
    """A site outside the grid is read as another row's or sample's (its features leaked into sample 1's output),
    and a duplicate races; neither is checked per call, and ``check()`` finds both."""
    features, indices = random_cloud(1, (6, 6, 6), 0.2, 4, seed=3)
    assert SparseConvTensor(features, indices, (6, 6, 6), 1).check() is not None
    bad = indices.clone()
    bad[-1] = torch.tensor(row, dtype=bad.dtype) if row is not None else bad[0]
    with pytest.raises(ValueError, match=problem):
        SparseConvTensor(features, bad, (6, 6, 6), 1).check()


def test_opcheck_ops():
    features, indices = random_cloud(2, (5, 5, 5), 0.2, 4, seed=9)
    nbr = ops.sparse_rulebook_subm(indices, [5, 5, 5], [3, 3, 3], [1, 1, 1])
    weight = torch.randn(6, 3, 3, 3, 4)
    torch.library.opcheck(ops.sparse_rulebook_subm, (indices, [5, 5, 5], [3, 3, 3], [1, 1, 1]))
    torch.library.opcheck(ops.sparse_conv_compute, (features, weight, nbr, torch.randn(6)))
    torch.library.opcheck(ops.sparse_conv_compute, (features, weight, nbr, None))
    torch.library.opcheck(ops.sparse_rulebook_transpose, (nbr, indices.shape[0]))
    torch.library.opcheck(ops.sparse_rulebook_subm_ordered, (indices, [5, 5, 5], [3, 3, 3], [1, 1, 1]))
    torch.library.opcheck(ops.sparse_rulebook_order, (nbr,))
    torch.library.opcheck(ops.sparse_rulebook_strided, (indices, [5, 5, 5], [3, 3, 3], [2, 2, 2], [1, 1, 1], [1, 1, 1]))



def test_backward_through_compute_is_an_error_not_a_missing_gradient():
    features, indices = random_cloud(1, (5, 5, 5), 0.3, 4, seed=11)
    conv = SubMConv3d(4, 3, 3)
    out = conv(SparseConvTensor(features, indices, (5, 5, 5), 1)).features
    assert out.requires_grad
    with pytest.raises(RuntimeError, match="inference-only and has no backward"):
        out.sum().backward()
    assert conv.weight.grad is None
    # Grad-free calls take the direct path to the kernel; the result is the same.
    with torch.no_grad():
        direct = conv(SparseConvTensor(features, indices, (5, 5, 5), 1)).features
    assert not direct.requires_grad
    assert torch.equal(direct, out.detach())

@pytest.mark.parametrize("kernel_size", [3, 5])
def test_rulebook_order_is_a_mask_sorted_permutation(kernel_size):
    _, indices = random_cloud(2, (6, 7, 8), 0.3, 1, seed=10)
    nbr = ops.sparse_rulebook_subm(indices, [6, 7, 8], [kernel_size] * 3, [1, 1, 1])
    order = ops.sparse_rulebook_order(nbr)
    assert order.dtype == torch.int32
    assert torch.equal(torch.sort(order.long()).values, torch.arange(nbr.shape[0]))
    active = (nbr[order.long()] >= 0).long()
    key = (active << torch.arange(nbr.shape[1])).sum(1) if nbr.shape[1] <= 31 else active.sum(1)
    assert (key[1:] >= key[:-1]).all()


def test_eval_batch_norm_on_features_equals_batchnorm1d():
    from hybrid_trt.plugins.sparse import batch_norm_features

    bn = torch.nn.BatchNorm1d(6, eps=1e-3)
    with torch.no_grad():
        bn.running_mean.uniform_(-1, 1)
        bn.running_var.uniform_(0.5, 2)
        bn.weight.uniform_(0.5, 1.5)
        bn.bias.uniform_(-1, 1)
    x = torch.randn(50, 6)
    torch.testing.assert_close(batch_norm_features(bn.eval(), x), bn(x))
    torch.testing.assert_close(batch_norm_features(bn.eval(), x[:0]), x[:0])
    bn.train()
    torch.testing.assert_close(batch_norm_features(bn, x), torch.nn.functional.batch_norm(
        x, None, None, bn.weight, bn.bias, training=True, eps=bn.eps))
