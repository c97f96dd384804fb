"""triton_launch.py: Triton kernels launched straight through their compiled
launcher after the first launch of each key (CUDA), through Triton itself
under the interpreter. The kernels run in a child process because the
interpreter must be switched on before Triton is imported."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest
import torch

triton = pytest.importorskip("triton")

from hybrid_trt.plugins.sparse import triton_launch  # noqa: E402

_SCRIPT = pathlib.Path(__file__).with_name("triton_launch_check.py")


def _check(device: str, env: dict) -> None:
    proc = subprocess.run([sys.executable, str(_SCRIPT), device], env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "FAILURES 0" in proc.stdout


def test_kernels_interpreted_on_cpu():
    _check("cpu", dict(os.environ, TRITON_INTERPRET="1"))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_kernels_launched_directly_on_cuda():
    _check("cuda", {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"})


def test_key_has_what_an_unspecialised_signature_has():
    kind = triton_launch._kind
    assert [kind(v) for v in (0, 2**31 - 1, -(2**31))] == [0, 0, 0]  # i32
    assert [kind(v) for v in (2**31, -(2**31) - 1, 2**63 - 1)] == [1, 1, 1]  # i64
    assert kind(2**63) == 2  # u64
    assert kind(True) is bool and kind(1.5) is float and kind(None) is type(None)
    assert kind(torch.zeros(1, dtype=torch.int64)) == torch.int64
    assert kind(torch.nn.Parameter(torch.zeros(1))) == torch.float32
    # Triton specialises tuple elements and keys constexprs and functions by value: not keyed, Triton's path.
    assert kind((1, 2)) is triton_launch._UNKEYED and kind(triton.language.constexpr(3)) is triton_launch._UNKEYED


def test_key_agrees_with_tritons_own_signature():
    """Two arguments get the same kind exactly when Triton's binder, not specialising, gives them the same type."""
    jit = pytest.importorskip("triton.runtime.jit")
    specialize = getattr(jit, "native_specialize_impl", None)
    if specialize is None:
        pytest.skip("this triton has no native_specialize_impl")
    from triton.backends.compiler import BaseBackend

    values = [0, 1, 16, 17, -1, 2**31 - 1, 2**31, -(2**31) - 1, 2**63 - 1, 2**63, True, False, 1.0, 2.5, None,
              torch.zeros(2, dtype=torch.int32), torch.zeros(3, dtype=torch.int32)[1:], torch.zeros(2),
              torch.zeros(2, dtype=torch.int64), torch.zeros(2, dtype=torch.float16)]
    signature = [specialize(BaseBackend, v, False, False, False) for v in values]
    kinds = [triton_launch._kind(v) for v in values]
    for i in range(len(values)):
        for j in range(len(values)):
            same_kind = kinds[i] == kinds[j] and type(kinds[i]) is type(kinds[j])
            assert same_kind == (signature[i] == signature[j]), (values[i], values[j], signature[i], signature[j])


def test_no_runtime_argument_is_specialised():
    def copy_kernel(x_ptr, y_ptr, n, BLOCK: "tl.constexpr"):  # noqa: F821 - Triton reads the annotation
        pass

    kernel = triton_launch.unspecialized_jit(copy_kernel)
    runtime = [p for p in kernel.jit.params if not p.is_constexpr]
    assert [p.name for p in runtime] == ["x_ptr", "y_ptr", "n"]
    assert all(p.do_not_specialize and p.do_not_specialize_on_alignment for p in runtime)


def test_constexpr_before_a_runtime_argument_is_refused():
    def kernel(x_ptr, BLOCK: "tl.constexpr", n):  # noqa: F821
        pass

    with pytest.raises(TypeError, match="constexpr parameters must come after"):
        triton_launch.unspecialized_jit(kernel)


def test_a_launch_hook_counts_only_when_set():
    hooked = triton_launch._hooked
    assert not hooked(None) and hooked(print)
    chain_type = getattr(getattr(triton, "knobs", None), "HookChain", None)
    if chain_type is not None:  # triton >= 3.5: launch_enter_hook is a HookChain, empty by default
        chain = chain_type()
        assert not hooked(chain)
        chain.add(print)
        assert hooked(chain)


class _FakeCompiled:
    """Stands in for Triton's CompiledKernel: records the launcher's calls."""

    def __init__(self, launches):
        self.function, self.packed_metadata, self.launches = "function", "metadata", launches

    def _init_handles(self):
        pass

    def run(self, *args):
        self.launches.append(("direct", args))


class _FakeJit:
    """Stands in for the JITFunction: each ``[grid](...)`` is a launch through Triton."""

    def __init__(self, launches):
        self.launches = launches

    def __getitem__(self, grid):
        def launch(*args, **constexprs):
            self.launches.append(("triton", grid, args, constexprs))
            return _FakeCompiled(self.launches)
        return launch


def test_dispatch_first_launch_through_triton_then_direct(monkeypatch):
    """The dispatch logic on a machine without a GPU: the device, the stream and the compiled kernel are
    stand-ins (the real launcher is checked on a GPU by triton_launch_check.py)."""
    def scale_kernel(x_ptr, n, SCALE: "tl.constexpr"):  # noqa: F821
        pass

    kernel = triton_launch.unspecialized_jit(scale_kernel)
    if kernel._knobs is None:
        pytest.skip("this triton has no knobs")
    launches = []
    kernel.jit, kernel._direct = _FakeJit(launches), True
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda device: 77, raising=False)
    x = torch.zeros(4, dtype=torch.int32)

    kernel[(3,)](x, 5, SCALE=2)
    kernel[(4, 2)](x, 6, SCALE=2)          # same key: the compiled launcher, the grid padded to 3-D
    kernel[(3,)](x, 5, SCALE=3)            # a new constexpr: through Triton
    kernel[(3,)](x, 2**40, SCALE=2)        # an i64 int: through Triton
    kernel[(3,)](x.long(), 5, SCALE=2)     # another dtype: through Triton
    kernel[(3,)](x, (5, 6), SCALE=2)       # a tuple is not keyed: through Triton, every time
    kernel[(3,)](x, (5, 6), SCALE=2)
    kernel[lambda meta: (1,)](x, 5, SCALE=2)  # a callable grid: through Triton
    assert [entry[0] for entry in launches] == ["triton", "direct", "triton", "triton", "triton", "triton",
                                                 "triton", "triton"]
    assert launches[1][1] == (4, 2, 1, 77, "function", "metadata", None, None, None, x, 6, 2)
    assert len(kernel._compiled) == 4 and all(v is not None for v in kernel._compiled.values())

    knobs = triton.knobs.runtime
    monkeypatch.setattr(knobs, "debug", not knobs.debug)  # a compile setting: a new key
    kernel[(3,)](x, 5, SCALE=2)
    assert launches[-1][0] == "triton" and len(kernel._compiled) == 5
    kernel._pre_run_hooks.append(print)  # a pre-run hook: through Triton
    try:
        kernel[(3,)](x, 5, SCALE=2)
    finally:
        kernel._pre_run_hooks.remove(print)
    assert launches[-1][0] == "triton"
    kernel[(3,)](x, 5, SCALE=2)
    assert launches[-1][0] == "direct"
