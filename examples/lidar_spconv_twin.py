"""The native spconv 2.x twin of a model built on ``hybrid_trt.plugins.sparse``, with the same weights.

LiDAR teams run spconv 2.x eagerly; the comparison they make is their spconv model against ours under
``torch.compile(backend="hybrid_trt")``. ``spconv_twin(model)`` builds that spconv model from ours by walking
its modules: every sparse conv becomes spconv's equivalent holding the same weights (both use the layout
``[out, kD, kH, kW, in]``), every ``SparseSequential`` spconv's, everything else is copied as it is. The twin
follows the model's code, so it stays right when the model changes; a sparse module type it does not know is
an error, never silently copied.

The model's own code builds *our* ``SparseConvTensor`` and hands it to its sparse backbone; the outermost
converted modules convert that tensor into the library's on entry (a forward pre-hook), so the module tree
and ``state_dict`` keys are unchanged. Rulebooks are not carried across: spconv builds its own.

``lib`` is ``spconv.pytorch`` by default; ``spconv_triton.pytorch`` (the same API) works too.
Used by ``benchmarks/bench_sparse.py`` and ``tests/plugins/test_spconv_twin.py``.
"""

from __future__ import annotations

import copy
from types import ModuleType
from typing import Optional

import torch
from torch import nn

from hybrid_trt.plugins.sparse import (
    SparseConv3d,
    SparseConvTensor,
    SparseInverseConv3d,
    SparseSequential,
    SubMConv3d,
)
from hybrid_trt.plugins.sparse.modules import _SparseConv


def native_spconv() -> ModuleType:
    """``spconv.pytorch``; an ImportError says how to get it (it is an optional benchmark dependency)."""
    try:
        import spconv.pytorch as lib
    except ImportError as e:
        raise ImportError(
            f"native spconv 2.x is not importable ({e}); install spconv-cu126 (GPU) or spconv (CPU) with a "
            "matching cumm; see README.md, 'Plugins: 3D sparse convolution'"
        ) from e
    return lib


def twin_conv(conv: _SparseConv, lib: Optional[ModuleType] = None) -> nn.Module:
    """The library's equivalent of one of our sparse convs, holding a copy of its weights, on its device and
    in its dtype, in eval mode if ``conv`` is."""
    lib = lib or native_spconv()
    kind = type(conv)
    common = dict(bias=conv.bias is not None, indice_key=conv.indice_key)
    if conv.weight.device.type == "cpu" and lib.__name__.startswith("spconv."):
        from spconv.core import ConvAlgo

        # Native spconv runs CPU tensors only with this algorithm; its CUDA builds default to implicit GEMM.
        common["algo"] = ConvAlgo.Native
    if kind is SparseInverseConv3d:
        twin = lib.SparseInverseConv3d(conv.in_channels, conv.out_channels, conv.kernel_size, **common)
    elif kind in (SubMConv3d, SparseConv3d):
        # Ours ignores a SubM layer's padding (the kernel is centred), as spconv does; passed for the record.
        cls = lib.SubMConv3d if kind is SubMConv3d else lib.SparseConv3d
        twin = cls(
            conv.in_channels, conv.out_channels, conv.kernel_size, stride=conv.stride, padding=conv.padding,
            dilation=conv.dilation, **common,
        )
    else:
        raise TypeError(
            f"no spconv twin for {kind.__qualname__}: only SubMConv3d, SparseConv3d and SparseInverseConv3d "
            "map one to one; extend examples/lidar_spconv_twin.py for a new sparse module type"
        )
    if tuple(twin.weight.shape) != tuple(conv.weight.shape):
        raise ValueError(
            f"{lib.__name__} stores this conv's weight as {tuple(twin.weight.shape)}, ours as "
            f"{tuple(conv.weight.shape)}; a weight layout setting (SPCONV_SAVED_WEIGHT_LAYOUT?) changed it"
        )
    twin = twin.to(device=conv.weight.device, dtype=conv.weight.dtype)
    with torch.no_grad():
        twin.weight.copy_(conv.weight)
        if conv.bias is not None:
            twin.bias.copy_(conv.bias)
    return twin.train(conv.training)


def spconv_twin(model: nn.Module, lib: Optional[ModuleType] = None) -> nn.Module:
    """A copy of ``model`` whose sparse modules are the library's, with the same weights (see the module
    docstring). ``model`` is left untouched."""
    lib = lib or native_spconv()
    twin = copy.deepcopy(model)  # the copy's non-sparse modules are the twin's own
    root = _twin_of(twin, lib)
    if root is not None:  # the model is itself a sparse section
        root.register_forward_pre_hook(_make_entry_hook(lib))
        return root
    if not _replace_children(twin, lib):
        raise ValueError(f"spconv_twin: {type(model).__name__} holds no hybrid_trt sparse modules to convert")
    return twin


def _twin_of(module: nn.Module, lib: ModuleType) -> Optional[nn.Module]:
    """The library's twin of a sparse module (recursively for a SparseSequential), or None if not sparse."""
    if isinstance(module, SparseSequential):
        seq = lib.SparseSequential()
        for name, child in module.named_children():
            # Non-sparse children (BatchNorm1d, ReLU, ...) act on the features in both libraries.
            seq.add_module(name, _twin_of(child, lib) or child)
        return seq.train(module.training)
    if isinstance(module, _SparseConv):
        return twin_conv(module, lib)
    return None


def _replace_children(parent: nn.Module, lib: ModuleType) -> bool:
    replaced = False
    for name, child in list(parent.named_children()):
        twin = _twin_of(child, lib)
        if twin is None:
            replaced |= _replace_children(child, lib)
            continue
        # Entry into a sparse section from dense code: the model built our tensor, the library wants its own.
        twin.register_forward_pre_hook(_make_entry_hook(lib))
        setattr(parent, name, twin)
        replaced = True
    return replaced


def _make_entry_hook(lib: ModuleType):
    def to_library_tensor(module, args):
        if args and isinstance(args[0], SparseConvTensor):
            x = args[0]
            return (lib.SparseConvTensor(x.features, x.indices, list(x.spatial_shape), x.batch_size), *args[1:])
        return None

    return to_library_tensor


def stored_pairs_compute(conv: nn.Module, features: torch.Tensor, data) -> torch.Tensor:
    """spconv's conv on index pairs it stored under an indice_key (``data`` from ``indice_dict``), without
    rebuilding them: the calls spconv's ``SparseConvolution._conv_forward`` makes when it reuses a SubM
    layer's pairs, in inference, for a forward (not inverse) conv. spconv's modules reuse pairs only for
    SubM layers (a strided conv asserts "only support reuse subm indices"), so this is how a strided layer's
    conv on cached pairs is timed."""
    native_spconv()
    from spconv.core import ConvAlgo
    from spconv.pytorch import functional as Fsp
    from spconv.pytorch import ops as spops
    from spconv.pytorch.conv import SparseConvolution
    from spconv.pytorch.core import CUDAKernelTimer

    if not isinstance(conv, SparseConvolution) or conv.training or conv.inverse:
        raise ValueError("stored_pairs_compute: an eval-mode, forward spconv conv is needed")
    features = features.contiguous()
    timer = CUDAKernelTimer(False)
    num_out = data.out_indices.shape[0]
    if data.algo == ConvAlgo.Native:
        fn = Fsp.indice_subm_conv if conv.subm else Fsp.indice_conv
        return fn(features, conv.weight, data.indice_pairs, data.indice_pair_num, num_out, data.algo, timer, conv.bias)
    out, _, _ = spops.implicit_gemm(
        features, conv.weight, data.pair_fwd, data.pair_mask_fwd_splits, data.mask_argsort_fwd_splits, num_out,
        data.masks, False, conv.subm, timer, conv.fp32_accum, conv.bias, output_dtype=conv.weight.dtype,
    )
    return out
