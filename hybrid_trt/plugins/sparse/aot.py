"""Ahead-of-time compilation of the implicit-GEMM kernel to PTX, for the
TensorRT plugin's ``aot_impl``. Needs Triton but neither TensorRT nor a GPU
(Triton's NVIDIA backend compiles for a named target), so it is tested on CPU.
"""

from __future__ import annotations

import dataclasses

_TYPES = {"fp32": "*fp32", "fp16": "*fp16"}


@dataclasses.dataclass(frozen=True)
class AotKernel:
    name: str
    ptx: str
    block_m: int
    block_n: int
    num_warps: int
    shared_mem: int


def gemm_tiles(c_in: int, c_out: int) -> dict:
    # The JIT launcher's fixed tiles. Its autotuned choice (per row-count class, made at the first call) is not
    # known when the AOT kernel is compiled, so an autotuned JIT launch may use other tiles than this kernel.
    from .triton_gemm import gemm_config

    cfg = gemm_config(c_in, c_out)
    cfg.setdefault("num_warps", 4)
    cfg.setdefault("num_stages", 2)
    return cfg


def compile_conv_kernel(dtype: str, kernel_volume: int, c_in: int, c_out: int, capability: int = 90) -> AotKernel:
    """PTX of the implicit-GEMM kernel for one dtype / kernel volume / channel
    count. ``capability`` is the SM version, e.g. 90 for Hopper."""
    if dtype not in _TYPES:
        raise ValueError(f"AOT sparse conv supports {sorted(_TYPES)}, got {dtype!r}")
    import triton
    from triton.backends.compiler import GPUTarget

    from .triton_gemm import _implicit_gemm_kernel

    cfg = gemm_tiles(c_in, c_out)
    ptr = _TYPES[dtype]
    signature = {
        "feat_ptr": ptr, "w_ptr": ptr, "nbr_ptr": "*i32", "order_ptr": "*i32", "bias_ptr": ptr,
        "M": "i32",
        "out_ptr": ptr,
    }
    constexprs = {
        "CIN": c_in, "COUT": c_out, "K": kernel_volume, "HAS_ORDER": True, "HAS_BIAS": True, "PRECISION": "ieee",
        "W_KCC": True,  # the plugin's weight input is [K, Cin, Cout] (lowering.py)
        "BLOCK_M": cfg["BLOCK_M"], "BLOCK_N": cfg["BLOCK_N"], "BLOCK_K": cfg["BLOCK_K"],
        "PRELOAD_NBR": False, "KP": triton.next_power_of_2(kernel_volume),
    }
    signature.update({k: "constexpr" for k in constexprs})
    # Index-tuple keys work on every Triton 3.x; name keys only on newer ones.
    by_index = {(_implicit_gemm_kernel.arg_names.index(k),): v for k, v in constexprs.items()}
    src = triton.compiler.ASTSource(fn=_implicit_gemm_kernel, signature=signature, constexprs=by_index)
    compiled = triton.compile(
        src,
        target=GPUTarget("cuda", capability, 32),
        options={"num_warps": cfg["num_warps"], "num_stages": cfg["num_stages"]},
    )
    meta = compiled.metadata
    # TensorRT passes only (inputs, scalars, outputs); Triton's hidden scratch
    # parameters must then be unused.
    for field in ("global_scratch_size", "profile_scratch_size"):
        if getattr(meta, field, 0):
            raise RuntimeError(f"sparse conv kernel needs Triton {field}={getattr(meta, field)}; cannot run as a TensorRT AOT plugin")
    return AotKernel(meta.name, compiled.asm["ptx"], cfg["BLOCK_M"], cfg["BLOCK_N"], meta.num_warps, meta.shared)
