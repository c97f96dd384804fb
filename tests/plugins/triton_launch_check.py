"""Checks of triton_launch.UnspecializedKernel, run as a script: ``cpu`` under
Triton's interpreter (set TRITON_INTERPRET=1 before running), ``cuda`` on a
GPU, where later launches take the direct path. Prints one line per check and
``FAILURES <n>``; exits non-zero on any failure."""

from __future__ import annotations

import logging
import sys

import torch
import triton
import triton.language as tl

from hybrid_trt.plugins.sparse.triton_launch import unspecialized_jit


@unspecialized_jit
def _scale_add_kernel(x_ptr, y_ptr, n, a, SCALE: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    tl.store(y_ptr + offs, x * SCALE + a, mask=m)


def _run(x, a, scale, block=128):
    y = torch.empty_like(x)
    n = x.shape[0]
    _scale_add_kernel[(-(-n // block),)](x, y, n, a, SCALE=scale, BLOCK=block)
    return y


def main(device: str) -> int:
    failures = 0
    logging.basicConfig(level=logging.DEBUG, format="%(name)s: %(message)s")  # why a kernel went through Triton
    print(f"triton {triton.__version__}")

    def check(name, ok):
        nonlocal failures
        failures += not ok
        print(f"{name}: ok={bool(ok)}")

    cases = [  # dtype, offset a, scale: each switch of dtype, int width or constexpr is a new kernel
        (torch.int32, 3, 2), (torch.int32, 5, 2), (torch.int32, 5, 3), (torch.int64, 2**40, 2),
        (torch.float32, 1, 2), (torch.int32, 7, 2), (torch.float16, 1, 2),
    ]
    for dtype, a, scale in cases:
        for n in (1, 300, 1000):  # the second and third launches of a key take the direct path on CUDA
            x = torch.arange(n, device=device).to(dtype)
            check(f"{dtype} a={a} scale={scale} n={n}", torch.equal(_run(x, a, scale), x * scale + a))
    # An unaligned pointer (a view one element in) reuses the kernel: nothing is specialised on alignment.
    base = torch.arange(1001, device=device, dtype=torch.int32)
    check("unaligned view", torch.equal(_run(base[1:], 3, 2), base[1:] * 2 + 3))
    if device == "cuda":
        keys = {(dtype, a >= 2**31, scale) for dtype, a, scale in cases}  # the offset's value is not in the key
        direct = [v for v in _scale_add_kernel._compiled.values() if v is not None]
        check(f"one direct launcher per key ({len(direct)} for {len(keys)} keys)",
              len(direct) == len(_scale_add_kernel._compiled) == len(keys))
        through_triton = []
        jit_run = _scale_add_kernel.jit.run
        _scale_add_kernel.jit.run = lambda *a, **k: (through_triton.append(1), jit_run(*a, **k))[1]
        x = torch.arange(4096, device=device, dtype=torch.int32)
        check("a cached key launches directly", torch.equal(_run(x, 3, 2), x * 2 + 3) and not through_triton)
        # On a side stream held back by a sleep, the input is written after the sleep: a launch on any other
        # stream would read it before it is written.
        stream = torch.cuda.Stream()
        torch.cuda.synchronize()
        with torch.cuda.stream(stream):
            torch.cuda._sleep(50_000_000)
            src = torch.empty_like(x)
            src.copy_(x)
            y = _run(src, 3, 2)
        stream.synchronize()
        check("launch on a side stream, ordered after its work", torch.equal(y, x * 2 + 3) and not through_triton)
        # Captured into a CUDA graph and replayed on new input.
        static_x = x.clone()
        _run(static_x, 3, 2)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_y = _run(static_x, 3, 2)
        static_x.copy_(x * 5)
        graph.replay()
        torch.cuda.synchronize()
        check("captured in a CUDA graph, replayed on new input", torch.equal(static_y, x * 10 + 3))
        # A launch hook (profilers) sends launches through Triton, which calls it.
        calls = []
        knobs = triton.knobs.runtime
        chain = knobs.launch_enter_hook  # a HookChain from triton 3.5 on, before that None or a callable
        hook = calls.append
        if hasattr(chain, "add"):
            chain.add(hook)
        else:
            knobs.launch_enter_hook = hook
        try:
            before = len(through_triton)
            y = _run(x, 3, 2)
        finally:
            if hasattr(chain, "remove"):
                chain.remove(hook)
            else:
                knobs.launch_enter_hook = chain
        check("launch hook honoured", len(calls) == 1 and len(through_triton) == before + 1
              and torch.equal(y, x * 2 + 3))
        check("direct again once the hook is gone",
              torch.equal(_run(x, 3, 2), x * 2 + 3) and len(calls) == 1 and len(through_triton) == before + 1)
        # A compile setting Triton folds into its options (debug) makes a new kernel, as it would for Triton.
        n_before = len(_scale_add_kernel._compiled)
        knobs.debug = True
        try:
            y = _run(x, 3, 2)
        finally:
            knobs.debug = False
        check("a changed compile setting is a new key", len(_scale_add_kernel._compiled) == n_before + 1
              and torch.equal(y, x * 2 + 3))
        _scale_add_kernel.jit.run = jit_run
    else:
        check("interpreter: nothing cached", not _scale_add_kernel._compiled)
    print(f"FAILURES {failures}")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1] if len(sys.argv) > 1 else "cpu"))
