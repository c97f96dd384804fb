"""Dense oracles for the sparse-conv tests: densify, run torch's conv3d /
conv_transpose3d, read back the active output sites."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from hybrid_trt.plugins.sparse.geometry import subm_padding, triple


def random_cloud(batch_size, spatial_shape, density, channels, seed, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    occ = torch.rand((batch_size, *spatial_shape), generator=g) < density
    indices = occ.nonzero().to(torch.int32)
    # Shuffle: real voxelisers emit sites in arbitrary order.
    indices = indices[torch.randperm(indices.shape[0], generator=g)]
    features = torch.randn((indices.shape[0], channels), generator=g).to(dtype)
    return features, indices


def gather_sites(dense_cl: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    """``dense_cl`` is ``[B, C, D, H, W]``; returns ``[N, C]`` at ``indices``."""
    i = indices.long()
    return dense_cl.permute(0, 2, 3, 4, 1)[i[:, 0], i[:, 1], i[:, 2], i[:, 3]]


def densify(features, indices, spatial_shape, batch_size):
    out = features.new_zeros((batch_size, *spatial_shape, features.shape[1]))
    i = indices.long()
    out[i[:, 0], i[:, 1], i[:, 2], i[:, 3]] = features
    return out.permute(0, 4, 1, 2, 3)


def to_dense_weight(weight):
    """spconv ``[Cout, kD, kH, kW, Cin]`` -> conv3d ``[Cout, Cin, kD, kH, kW]``."""
    return weight.permute(0, 4, 1, 2, 3)


def subm_ref(features, indices, spatial_shape, batch_size, weight, bias, kernel_size, dilation):
    ks, dil = triple(kernel_size, "k"), triple(dilation, "d")
    x = densify(features.double(), indices, spatial_shape, batch_size)
    y = F.conv3d(x, to_dense_weight(weight).double(), None if bias is None else bias.double(),
                 padding=subm_padding(ks, dil), dilation=dil)
    return gather_sites(y, indices)


def strided_ref(features, indices, spatial_shape, batch_size, weight, bias, kernel_size, stride, padding, dilation):
    """Returns (active output indices sorted by (b, z, y, x), features there).
    Active sites come from convolving the occupancy grid with a ones kernel,
    independently of the rulebook code under test."""
    ks = triple(kernel_size, "k")
    x = densify(features.double(), indices, spatial_shape, batch_size)
    occ = densify(torch.ones((indices.shape[0], 1), dtype=torch.float64), indices, spatial_shape, batch_size)
    kw = dict(stride=stride, padding=padding, dilation=dilation)
    y = F.conv3d(x, to_dense_weight(weight).double(), None if bias is None else bias.double(), **kw)
    hits = F.conv3d(occ, torch.ones((1, 1, *ks), dtype=torch.float64), **kw)[:, 0]
    out_indices = (hits > 0).nonzero().to(torch.int32)
    return out_indices, gather_sites(y, out_indices), tuple(hits.shape[1:])


def inverse_ref(features, out_indices, out_shape, batch_size, weight, bias, in_indices, in_shape,
                kernel_size, stride, padding, dilation):
    ks, st = triple(kernel_size, "k"), triple(stride, "s")
    pad, dil = triple(padding, "p"), triple(dilation, "d")
    x = densify(features.double(), out_indices, out_shape, batch_size)
    natural = [(o - 1) * s - 2 * p + d * (k - 1) + 1 for o, s, p, d, k in zip(out_shape, st, pad, dil, ks)]
    output_padding = [n - m for n, m in zip(in_shape, natural)]
    y = F.conv_transpose3d(
        x, weight.permute(4, 0, 1, 2, 3).double(), None if bias is None else bias.double(),
        stride=st, padding=pad, dilation=dil, output_padding=output_padding,
    )
    return gather_sites(y, in_indices)
