"""Every rulebook kernel of the sparse plugin compiles for a real GPU target.

The interpreter tests (test_sparse_triton.py) check what the kernels compute
but run them as Python, which accepts code the Triton compiler rejects (for
example a global that is not a constexpr). Triton's NVIDIA backend compiles
for a named target without a GPU, so CI catches those errors too. (The GEMM kernel's AOT compile is tested
with the TensorRT plugin, in test_sparse_lowering.py.)
"""

from __future__ import annotations

import pytest
import torch

triton = pytest.importorskip("triton")

from triton.backends.compiler import GPUTarget  # noqa: E402

I32_ARGS = {"N", "M", "total", "cap_mask", "shift", "sites_cap", "D", "H", "W", "OD", "OH", "OW",
            "SZ", "SY", "SX", "PZ", "PY", "PX", "DZ", "DY", "DX"}


def _compile(fn, pointers: dict, scalars: dict, constexprs: dict):
    fn = getattr(fn, "jit", fn)  # the rulebook kernels are UnspecializedKernel (triton_launch.py)
    signature = {name: pointers.get(name) or scalars.get(name) or ("i32" if name in I32_ARGS else "constexpr")
                 for name in fn.arg_names}
    by_index = {(fn.arg_names.index(k),): v for k, v in constexprs.items()}
    src = triton.compiler.ASTSource(fn=fn, signature=signature, constexprs=by_index)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4})


def _rulebook_kernels():
    from hybrid_trt.plugins.sparse import triton_rulebook as T

    geometry = dict(KY=3, KX=3, K=27)
    search = {"out_ptr": "*i32", "table_key_ptr": "*i64", "table_row_ptr": "*i32", "nbr_ptr": "*i32",
              "mask_key_ptr": "*i32"}
    sites = {"idx_ptr": "*i32", "site_mask_ptr": "*i32", "sites_ptr": "*i32", "slots_ptr": "*i32",
             "status_ptr": "*i32"}
    number = {"sorted_ptr": "*i32", "perm_ptr": "*i64", "slots_ptr": "*i32", "site_row_ptr": "*i32",
              "out_idx_ptr": "*i32"}
    push = {"idx_ptr": "*i32", "site_row_ptr": "*i32", "nbr_ptr": "*i32"}
    order_key = {"sites_ptr": "*i32", "slots_ptr": "*i32", "site_mask_ptr": "*i32", "order_key_ptr": "*i64"}
    return [
        (T._hash_insert_kernel, {"idx_ptr": "*i32", "table_key_ptr": "*i64", "table_row_ptr": "*i32"}, {},
         dict(BLOCK=256)),
        # SubM / given sites, with and without mask keys (bits, or counts for K > 31).
        (T._hash_search_kernel, search, {}, dict(geometry, KP=32, MASK_KEY=0, BLOCK_M=32)),
        (T._hash_search_kernel, search, {}, dict(geometry, KP=32, MASK_KEY=1, BLOCK_M=32)),
        (T._hash_search_kernel, search, {}, dict(KY=5, KX=5, K=125, KP=128, MASK_KEY=2, BLOCK_M=8)),
        # Strided: sites with mask keys (bits, or counts for K > 31), the order keys, their numbering and the
        # pushed map, from int32 or int64 keys.
        (T._strided_sites_kernel, dict(sites, table_ptr="*i32"), {"LIMIT": "i32"},
         dict(geometry, MASK_KEY=1, BLOCK=256, SCRATCH_GROUPS=32)),
        (T._strided_sites_kernel, dict(sites, table_ptr="*i64", sites_ptr="*i64"), {"LIMIT": "i64"},
         dict(KY=5, KX=5, K=125, MASK_KEY=2, BLOCK=256, SCRATCH_GROUPS=32)),
        (T._strided_order_key_kernel, order_key, {}, dict(BLOCK=256)),
        (T._strided_number_kernel, dict(number, sorted_ptr="*i64"), {}, dict(ORDER_KEY=True, BLOCK=256)),
        (T._strided_number_kernel, dict(number, sorted_ptr="*i64"), {}, dict(ORDER_KEY=False, BLOCK=256)),
        (T._strided_push_kernel, dict(push, table_ptr="*i32"), {}, dict(geometry, BLOCK=256)),
        (T._strided_push_kernel, dict(push, table_ptr="*i64"), {}, dict(KY=5, KX=5, K=125, BLOCK=256)),
        (T._transpose_kernel, {"nbr_ptr": "*i32", "nbr_t_ptr": "*i32"}, {}, dict(K=27, BLOCK=256)),
        (T._mask_key_kernel, {"nbr_ptr": "*i32", "key_ptr": "*i32"}, {}, dict(K=27, KP=32, BITS=True, BLOCK_M=32)),
        (T._mask_key_kernel, {"nbr_ptr": "*i32", "key_ptr": "*i32"}, {}, dict(K=125, KP=128, BITS=False, BLOCK_M=8)),
    ]


@pytest.mark.parametrize("case", range(14))
def test_rulebook_kernel_compiles_for_sm90(case):
    fn, pointers, scalars, constexprs = _rulebook_kernels()[case]
    compiled = _compile(fn, pointers, scalars, constexprs)
    assert ".entry" in compiled.asm["ptx"]


@pytest.mark.parametrize("preload", [False, True])
@pytest.mark.parametrize("dtype", ["fp16", "fp32"])
def test_gemm_kernel_compiles_for_sm90_reading_spconv_weight_layout(dtype, preload):
    # The CUDA op reads spconv's [Cout, K, Cin] weight in place (W_KCC=False);
    # the TensorRT plugin's [K, Cin, Cout] variant compiles in test_sparse_lowering.py.
    from hybrid_trt.plugins.sparse.triton_gemm import _implicit_gemm_kernel

    ptr = "*" + dtype
    pointers = {"feat_ptr": ptr, "w_ptr": ptr, "nbr_ptr": "*i32", "order_ptr": "*i32", "bias_ptr": ptr, "out_ptr": ptr}
    constexprs = dict(CIN=64, COUT=64, K=27, HAS_ORDER=True, HAS_BIAS=True, PRECISION="ieee", W_KCC=False,
                      BLOCK_M=64, BLOCK_N=64, BLOCK_K=32, PRELOAD_NBR=preload, KP=32)
    compiled = _compile(_implicit_gemm_kernel, pointers, {}, constexprs)
    assert ".entry" in compiled.asm["ptx"]


def test_float32_weight_copy_is_reused_only_while_the_weight_is_unchanged():
    """The fp32 launcher's [K, Cin, Cout] weight copy is made once per weight; an in-place update, a `.data`
    swap or a new weight object each give a fresh, correct copy."""
    from hybrid_trt.plugins.sparse import triton_gemm as G

    w = torch.nn.Parameter(torch.randn(8, 3, 3, 3, 4), requires_grad=False)
    first = G._weight_kcc_reused(w)
    assert torch.equal(first, G.weight_kcc(w))
    assert G._weight_kcc_reused(w) is first  # reused: no copy per call
    w.mul_(2.0)  # in place: the version counter moves
    second = G._weight_kcc_reused(w)
    assert second is not first and torch.equal(second, G.weight_kcc(w))
    w.data = torch.randn(8, 3, 3, 3, 4)  # new storage, same object, same version
    third = G._weight_kcc_reused(w)
    assert third is not second and torch.equal(third, G.weight_kcc(w))
    other = torch.nn.Parameter(w.detach().clone(), requires_grad=False)
    assert G._weight_kcc_reused(other) is not third
    n = len(G._KCC)
    del other
    import gc

    gc.collect()
    assert len(G._KCC) == n - 1  # held weakly: the entry went with its weight


def test_float32_weight_copy_is_not_kept_where_it_could_go_stale_or_leak():
    from hybrid_trt.plugins.sparse import triton_gemm as G

    with torch.inference_mode():  # inference tensors have no version counter: never cached
        w = torch.randn(8, 3, 3, 3, 4)
    assert torch.equal(G._weight_kcc_reused(w), G.weight_kcc(w)) and w not in G._KCC
    # Cout == 1: the "copy" is a view of the weight itself; an entry would hold its own key alive forever.
    one = torch.nn.Parameter(torch.randn(1, 3, 3, 3, 4), requires_grad=False)
    assert torch.equal(G._weight_kcc_reused(one), G.weight_kcc(one)) and one not in G._KCC
    # A weight swapped to Cout == 1 (its "copy" is a view): the old entry, copy and storage reference, goes.
    w = torch.nn.Parameter(torch.randn(8, 3, 3, 3, 4), requires_grad=False)
    G._weight_kcc_reused(w)
    assert w in G._KCC
    w.data = torch.randn(1, 3, 3, 3, 4)
    assert torch.equal(G._weight_kcc_reused(w), G.weight_kcc(w)) and w not in G._KCC
    # A layer that now runs in half precision drops its float32 copy.
    w = torch.nn.Parameter(torch.randn(8, 3, 3, 3, 4), requires_grad=False)
    G._weight_kcc_reused(w)
    assert w in G._KCC
    G.forget_weight_kcc(w)
    assert w not in G._KCC
