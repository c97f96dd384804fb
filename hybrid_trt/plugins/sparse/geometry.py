"""Pure-Python geometry of 3D sparse convolution: argument normalisation,
output shapes, kernel offsets and coordinate hashing.

Conventions follow spconv: indices are int32 ``[N, 4]`` rows of
``(batch, z, y, x)`` and ``spatial_shape`` is ``(D, H, W)`` = ``(z, y, x)``.
Kernel offsets are enumerated in row-major ``(kz, ky, kx)`` order, which is
also the order of the flattened kernel axis of the weight.
"""

from __future__ import annotations

from typing import Sequence

import torch

Triple = tuple[int, int, int]


def triple(value, name: str) -> Triple:
    if isinstance(value, int):
        return (value, value, value)
    value = tuple(int(v) for v in value)
    if len(value) != 3:
        raise ValueError(
            f"{name} must be an int or a sequence of 3 ints (z, y, x), got {value!r}"
        )
    return value  # type: ignore[return-value]


def check_positive(value: Triple, name: str) -> None:
    if any(v <= 0 for v in value):
        raise ValueError(f"{name} must be positive in every dimension, got {value}")


def conv_output_shape(
    spatial_shape: Sequence[int],
    kernel_size: Triple,
    stride: Triple,
    padding: Triple,
    dilation: Triple,
) -> Triple:
    """Same formula as ``torch.nn.functional.conv3d``."""
    out = tuple(
        (s + 2 * p - d * (k - 1) - 1) // st + 1
        for s, k, st, p, d in zip(spatial_shape, kernel_size, stride, padding, dilation)
    )
    if any(o <= 0 for o in out):
        raise ValueError(
            f"sparse conv with kernel_size={kernel_size}, stride={stride}, "
            f"padding={padding}, dilation={dilation} leaves no output for "
            f"spatial_shape={tuple(spatial_shape)}; use a smaller kernel or more padding"
        )
    return out  # type: ignore[return-value]


def subm_padding(kernel_size: Triple, dilation: Triple) -> Triple:
    """Submanifold convs centre the kernel on each active site, like a dense
    conv with 'same' padding for odd kernels."""
    return tuple((k // 2) * d for k, d in zip(kernel_size, dilation))  # type: ignore[return-value]


def kernel_offsets(kernel_size: Triple, device: torch.device) -> torch.Tensor:
    """``[K, 3]`` int64 kernel positions ``(kz, ky, kx)`` in weight order."""
    kz, ky, kx = kernel_size
    grid = torch.meshgrid(
        torch.arange(kz, device=device),
        torch.arange(ky, device=device),
        torch.arange(kx, device=device),
        indexing="ij",
    )
    return torch.stack([g.reshape(-1) for g in grid], dim=1)


def hash_coords(batch: torch.Tensor, zyx: torch.Tensor, spatial_shape: Sequence[int]) -> torch.Tensor:
    """Row-major linear key of ``(b, z, y, x)``; injective for in-range
    coordinates, and monotone, so sorted keys are sorted coordinates."""
    D, H, W = (int(s) for s in spatial_shape)
    b = batch.to(torch.int64)
    zyx = zyx.to(torch.int64)
    return ((b * D + zyx[..., 0]) * H + zyx[..., 1]) * W + zyx[..., 2]


def unhash_coords(keys: torch.Tensor, spatial_shape: Sequence[int]) -> torch.Tensor:
    """Inverse of :func:`hash_coords`, returning int32 ``[M, 4]`` indices."""
    D, H, W = (int(s) for s in spatial_shape)
    x = keys % W
    rest = keys // W
    y = rest % H
    rest = rest // H
    z = rest % D
    b = rest // D
    return torch.stack([b, z, y, x], dim=1).to(torch.int32)
