"""spconv-style modules on top of the ``hybrid_trt`` sparse ops.

A spconv user should recognise the API: ``SparseConvTensor(features,
indices, spatial_shape, batch_size)``, ``SubMConv3d``, ``SparseConv3d``,
``SparseInverseConv3d``, ``SparseSequential`` and rulebook reuse through
``indice_key``. Weights use spconv 2.x's layout ``[Cout, kD, kH, kW, Cin]``.
"""

from __future__ import annotations

import math
from typing import NamedTuple, Optional, Sequence

import torch
from torch import nn

from . import ops
from .geometry import check_positive, conv_output_shape, triple


class Rulebook(NamedTuple):
    """What a conv leaves under its ``indice_key`` for later layers."""

    nbr: torch.Tensor  # [M, K] int32, input row per (output site, offset) or -1
    order: torch.Tensor  # [M] int32 row schedule for the GPU kernel (= sparse_rulebook_order(nbr))
    in_indices: torch.Tensor
    out_indices: torch.Tensor
    in_spatial_shape: tuple[int, int, int]
    out_spatial_shape: tuple[int, int, int]
    kernel_size: tuple[int, int, int]
    stride: tuple[int, int, int]
    padding: tuple[int, int, int]
    dilation: tuple[int, int, int]
    subm: bool


class SparseConvTensor:
    """Active-site features plus their coordinates.

    Args:
        features: ``[N, C]`` features of the active sites.
        indices: int32 ``[N, 4]`` rows ``(batch, z, y, x)`` (int64 runs too, never through the delegate's
            plugin); unique, and inside the batch and the grid (not checked per call: see ``check``).
        spatial_shape: ``(D, H, W)`` of the voxel grid.
        batch_size: number of samples in the batch.
    """

    def __init__(
        self,
        features: torch.Tensor,
        indices: torch.Tensor,
        spatial_shape: Sequence[int],
        batch_size: int,
        indice_dict: Optional[dict] = None,
    ):
        if indices.dim() != 2 or indices.shape[-1] != 4:
            raise ValueError(
                f"SparseConvTensor: indices must be [N, 4] rows of (batch, z, y, x), got {tuple(indices.shape)}"
            )
        if features.dim() != 2:
            raise ValueError(f"SparseConvTensor: features must be [N, C], got {tuple(features.shape)}")
        if not features.is_floating_point():  # as nn.Conv3d: an integer conv would round every output
            raise TypeError(f"SparseConvTensor: features must be a floating-point tensor, got {features.dtype}")
        if indice_dict is None:  # made by the caller (derived tensors share their source's dict and rows)
            # (a message without the sizes: Dynamo traces this check only with a closure of constants)
            torch._check_value(features.shape[0] == indices.shape[0], lambda: (
                "SparseConvTensor: features and indices have different numbers of rows; row i of features belongs "
                "to the site in row i of indices"))
        self.features = features
        self.indices = indices
        self.spatial_shape = tuple(int(s) for s in spatial_shape)
        if len(self.spatial_shape) != 3:
            raise ValueError(f"SparseConvTensor: spatial_shape must be (D, H, W), got {spatial_shape!r}")
        self.batch_size = int(batch_size)
        # Shared by every tensor derived from this one, as in spconv, so an
        # inverse conv deep in a decoder finds its encoder's rulebook.
        self.indice_dict = {} if indice_dict is None else indice_dict

    def check(self) -> "SparseConvTensor":
        """Raise ``ValueError`` naming the first bad row when a site lies outside the grid or the batch, or appears
        twice; else return ``self``. Not done per call: it reads every row (on a GPU it waits for the data), and the
        convs take the rows as given (a site outside the grid is read as another sample's or row's site, see
        docs/sparse.md). Call it where the indices are made, in a data pipeline or a test."""
        idx = self.indices.long()
        limits = torch.tensor([self.batch_size, *self.spatial_shape], device=idx.device)
        bad = ((idx < 0) | (idx >= limits)).any(dim=1).nonzero()
        if bad.numel():
            row = int(bad[0])
            raise ValueError(f"SparseConvTensor: indices row {row} {tuple(idx[row].tolist())} (batch, z, y, x) lies "
                             f"outside batch_size={self.batch_size} and spatial_shape={self.spatial_shape} "
                             f"({bad.numel()} such row(s))")
        unique, counts = torch.unique(idx, dim=0, return_counts=True)
        if unique.shape[0] != idx.shape[0]:
            site = tuple(unique[counts > 1][0].tolist())
            raise ValueError(f"SparseConvTensor: site {site} (batch, z, y, x) appears {int(counts.max())} times; "
                             f"{idx.shape[0] - unique.shape[0]} duplicate row(s) in all. Sites must be unique "
                             "(merge duplicates first, e.g. by averaging their features)")
        return self

    def replace_feature(self, features: torch.Tensor) -> "SparseConvTensor":
        return SparseConvTensor(features, self.indices, self.spatial_shape, self.batch_size, self.indice_dict)

    def find_indice_pair(self, key: Optional[str]) -> Optional[Rulebook]:
        if key is None:
            return None
        return self.indice_dict.get(key)

    def dense(self, channels_first: bool = True) -> torch.Tensor:
        """``[B, C, D, H, W]`` (or ``[B, D, H, W, C]``) with zeros at inactive sites."""
        idx = self.indices.long()
        out = self.features.new_zeros((self.batch_size, *self.spatial_shape, self.features.shape[1]))
        out[idx[:, 0], idx[:, 1], idx[:, 2], idx[:, 3]] = self.features
        if channels_first:
            return out.permute(0, 4, 1, 2, 3).contiguous()
        return out

    def __repr__(self) -> str:
        return (
            f"SparseConvTensor(features={tuple(self.features.shape)}, spatial_shape={self.spatial_shape}, "
            f"batch_size={self.batch_size})"
        )


class _SparseConv(nn.Module):
    subm = False
    inverse = False

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size=3,
        stride=1,
        padding=0,
        dilation=1,
        bias: bool = True,
        indice_key: Optional[str] = None,
    ):
        super().__init__()
        self.in_channels = int(in_channels)
        self.out_channels = int(out_channels)
        self.kernel_size = triple(kernel_size, "kernel_size")
        self.stride = triple(stride, "stride")
        self.padding = triple(padding, "padding")
        self.dilation = triple(dilation, "dilation")
        check_positive(self.kernel_size, "kernel_size")
        check_positive(self.stride, "stride")
        check_positive(self.dilation, "dilation")
        if min(self.padding) < 0:
            raise ValueError(f"padding must be non-negative, got {self.padding}")
        self.indice_key = indice_key
        self.weight = nn.Parameter(torch.empty(self.out_channels, *self.kernel_size, self.in_channels))
        self.bias = nn.Parameter(torch.empty(self.out_channels)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        # Same fan-in scaling as nn.Conv3d's default init.
        fan_in = self.in_channels * math.prod(self.kernel_size)
        bound = 1.0 / math.sqrt(fan_in)
        nn.init.uniform_(self.weight, -bound * math.sqrt(3.0), bound * math.sqrt(3.0))
        if self.bias is not None:
            nn.init.uniform_(self.bias, -bound, bound)

    def extra_repr(self) -> str:
        s = (
            f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
            f"stride={self.stride}, padding={self.padding}, dilation={self.dilation}"
        )
        if self.bias is None:
            s += ", bias=False"
        if self.indice_key is not None:
            s += f", indice_key={self.indice_key!r}"
        return s

    def _check_input(self, x: SparseConvTensor) -> None:
        if not isinstance(x, SparseConvTensor):
            raise TypeError(f"{type(self).__name__} expects a SparseConvTensor, got {type(x).__name__}")
        if x.features.shape[1] != self.in_channels:
            raise ValueError(
                f"{type(self).__name__}: input has {x.features.shape[1]} channels, "
                f"layer expects in_channels={self.in_channels}"
            )

    def _compute(self, features: torch.Tensor, rb: Rulebook) -> torch.Tensor:
        return ops.sparse_conv_compute(features, self.weight, rb.nbr, self.bias, rb.order)


class SubMConv3d(_SparseConv):
    """Submanifold conv: output sites are exactly the input sites; the kernel
    is centred on each site (``padding`` is ignored, as in spconv)."""

    subm = True

    def forward(self, x: SparseConvTensor) -> SparseConvTensor:
        self._check_input(x)
        rb = x.find_indice_pair(self.indice_key)
        if rb is not None and rb.subm and rb.in_indices is not x.indices:
            raise ValueError(
                f"indice_key {self.indice_key!r} is already used by a SubMConv3d on other active sites (a strided "
                f"conv changed them since, or the input differs); a key names one set of sites: give this "
                f"{type(self).__name__} its own indice_key")
        if rb is None or not (rb.subm and rb.kernel_size == self.kernel_size and rb.dilation == self.dilation):
            if rb is not None:
                raise ValueError(
                    f"indice_key {self.indice_key!r} is already used by a layer with a different "
                    f"geometry ({'subm' if rb.subm else 'strided'}, kernel_size={rb.kernel_size}, "
                    f"dilation={rb.dilation}); give this {type(self).__name__} its own indice_key"
                )
            nbr, order = ops.sparse_rulebook_subm_ordered(
                x.indices, list(x.spatial_shape), list(self.kernel_size), list(self.dilation)
            )
            rb = Rulebook(
                nbr, order, x.indices, x.indices, x.spatial_shape, x.spatial_shape,
                self.kernel_size, (1, 1, 1), (0, 0, 0), self.dilation, True,
            )
            if self.indice_key is not None:
                x.indice_dict[self.indice_key] = rb
        return x.replace_feature(self._compute(x.features, rb))


class SparseConv3d(_SparseConv):
    """Regular sparse conv: an output site is active when its receptive field
    holds an active input site. With ``indice_key``, a matching
    ``SparseInverseConv3d`` can map back to this layer's input sites."""

    def forward(self, x: SparseConvTensor) -> SparseConvTensor:
        self._check_input(x)
        out_shape = conv_output_shape(x.spatial_shape, self.kernel_size, self.stride, self.padding, self.dilation)
        rb = x.find_indice_pair(self.indice_key)
        if rb is not None:
            raise ValueError(
                f"indice_key {self.indice_key!r} is already taken: by another layer (each SparseConv3d needs a "
                f"unique indice_key, which its SparseInverseConv3d uses too), or by this one on an earlier call with "
                f"the same input SparseConvTensor, whose indice_dict keeps every rulebook (make a new "
                f"SparseConvTensor for each call)"
            )
        out_indices, nbr, order = ops.sparse_rulebook_strided(
            x.indices, list(x.spatial_shape), list(self.kernel_size), list(self.stride),
            list(self.padding), list(self.dilation),
        )
        rb = Rulebook(
            nbr, order, x.indices, out_indices, x.spatial_shape, out_shape,
            self.kernel_size, self.stride, self.padding, self.dilation, False,
        )
        if self.indice_key is not None:
            x.indice_dict[self.indice_key] = rb
        return SparseConvTensor(self._compute(x.features, rb), out_indices, out_shape, x.batch_size, x.indice_dict)


class SparseInverseConv3d(_SparseConv):
    """Inverse of the ``SparseConv3d`` that registered ``indice_key``: maps
    back onto that layer's input sites, like ``conv_transpose3d`` with the
    forward layer's stride, padding and dilation."""

    inverse = True

    def __init__(self, in_channels: int, out_channels: int, kernel_size, indice_key: str, bias: bool = True):
        if indice_key is None:
            raise ValueError("SparseInverseConv3d needs the indice_key of the SparseConv3d it inverts")
        super().__init__(in_channels, out_channels, kernel_size, bias=bias, indice_key=indice_key)

    def forward(self, x: SparseConvTensor) -> SparseConvTensor:
        self._check_input(x)
        rb = x.find_indice_pair(self.indice_key)
        if rb is None or rb.subm:
            raise KeyError(
                f"SparseInverseConv3d: no SparseConv3d rulebook under indice_key {self.indice_key!r}; "
                f"run the matching SparseConv3d(indice_key={self.indice_key!r}) earlier in the same forward"
            )
        if rb.kernel_size != self.kernel_size:
            raise ValueError(
                f"SparseInverseConv3d: kernel_size {self.kernel_size} differs from the forward conv's "
                f"{rb.kernel_size} under indice_key {self.indice_key!r}"
            )
        if x.indices is not rb.out_indices:
            raise ValueError(
                f"SparseInverseConv3d: its input is not on the output sites of the SparseConv3d under indice_key "
                f"{self.indice_key!r} (its {x.features.shape[0]} rows are other sites); apply it to that conv's "
                "output, or to what SubMConv3d layers and feature-wise modules made of it"
            )
        inv_key = self.indice_key + "/inverse"
        inv = x.indice_dict.get(inv_key)
        if inv is None:
            nbr_t = ops.sparse_rulebook_transpose(rb.nbr, rb.in_indices.shape[0])
            inv = rb._replace(nbr=nbr_t, order=ops.sparse_rulebook_order(nbr_t))
            x.indice_dict[inv_key] = inv
        return SparseConvTensor(
            self._compute(x.features, inv), rb.in_indices, rb.in_spatial_shape, x.batch_size, x.indice_dict
        )


def batch_norm_features(bn: nn.BatchNorm1d, features: torch.Tensor) -> torch.Tensor:
    """``bn(features)``, but in eval mode written as the affine map it is.

    The number of active sites after a strided conv is an unbacked size under
    torch.compile, and ``F.batch_norm`` branches on ``numel() == 0``, which
    Dynamo cannot decide for an unbacked size. The affine form has no branch.
    """
    if bn.training or not bn.track_running_stats or bn.running_mean is None:
        return bn(features)
    scale = torch.rsqrt(bn.running_var + bn.eps)
    if bn.weight is not None:
        scale = scale * bn.weight
    shift = -bn.running_mean * scale
    if bn.bias is not None:
        shift = shift + bn.bias
    return features * scale.to(features.dtype) + shift.to(features.dtype)


class SparseSequential(nn.Sequential):
    """Like spconv's: sparse layers get the SparseConvTensor, any other
    module (BatchNorm1d, ReLU, ...) is applied to its features."""

    def forward(self, x):
        for module in self:
            if isinstance(x, SparseConvTensor) and not isinstance(module, (_SparseConv, SparseSequential)):
                if isinstance(module, nn.BatchNorm1d):
                    x = x.replace_feature(batch_norm_features(module, x.features))
                else:
                    x = x.replace_feature(module(x.features))
            else:
                x = module(x)
        return x
