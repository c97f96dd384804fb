"""Triton kernels launched for a fraction of ``kernel[grid](...)``'s host cost.

``kernel[grid](*args)`` binds and specialises every argument, builds a cache
key and looks the compiled kernel up on every call: about 20 us of host time
per launch on the H200 (triton 3.6), against 6.5 us for the compiled kernel's
own launcher (benchmarks/probe_subm_order.py). A rulebook step does a few
microseconds of GPU work, so at tens of thousands of voxels that binding was
most of a step's cost.

``unspecialized_jit(fn)`` compiles ``fn`` so that its code depends on nothing
but its constexpr values and its arguments' types: no runtime argument is
specialised (ints are not specialised on their value, pointers not on their
alignment). The first launch of each (device, constexprs, argument types) goes
through Triton, which compiles or finds the kernel; later launches call that
compiled kernel's launcher directly on the current stream. The key holds what
Triton's own key holds once nothing is specialised, so a launch never reaches
a kernel compiled for different types.

The key also holds the Triton settings that enter its compile options (debug,
instrumentation, fp fusion, target override, a stages hook), read on every
launch, so changing one compiles anew as Triton would.

Triton's own path is kept whenever the direct one would skip something or
could not key it exactly: under the interpreter (the CPU tests), while a launch
hook (profilers) or a pre-run hook is set, for a callable grid, for an argument
that is not a tensor, int, bool, float or None (Triton specialises tuple
elements and keys constexpr values, functions and descriptors by content), and
when the compiled kernel does not expose the launcher this was written against
(``run``, ``function``, ``packed_metadata``). The direct path skips Triton's
check that the globals a kernel read have not changed since it was compiled;
the rulebook kernels read only constexpr globals.
"""

from __future__ import annotations

import functools
import inspect
import logging
import operator
import os

import torch
import triton

_I32_LO, _I32_HI, _I64_HI = -(2**31), 2**31, 2**63
_MISSING = object()
_UNKEYED = object()  # an argument whose kind is not all Triton's signature takes from it
_KEYED_TYPES = (bool, float, type(None))
_log = logging.getLogger("hybrid_trt.sparse")
_KNOBS = getattr(triton, "knobs", None)
_HOOK_CHAIN = getattr(_KNOBS, "HookChain", None)
# Settings Triton folds into a kernel's compile options (JITFunction.run, the backend's parse_options).
_OPTION_KNOBS = {"runtime": ("debug", "override_arch", "add_stages_inspection_hook"),
                 "compilation": ("instrumentation_mode",), "language": ("default_fp_fusion",)}


def triton_interprets() -> bool:
    """Whether Triton runs kernels in its interpreter: its own reading of ``TRITON_INTERPRET`` where it has knobs
    (``1``, ``true``, ``on``...), else that Triton's test of the variable."""
    interpret = getattr(getattr(_KNOBS, "runtime", None), "interpret", None)
    if interpret is None:
        return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
    return bool(interpret)


def _kind(arg):
    """What Triton's signature takes from an unspecialised argument: a tensor's
    dtype, an int's width (i32, i64, u64), a bool's, float's or None's type;
    ``_UNKEYED`` for anything else."""
    kind = type(arg)
    if kind is int:
        return 0 if _I32_LO <= arg < _I32_HI else (1 if arg < _I64_HI else 2)
    if isinstance(arg, torch.Tensor):
        return arg.dtype
    return kind if kind in _KEYED_TYPES else _UNKEYED


def _hooked(hook) -> bool:
    """A launch hook is set: a HookChain (triton >= 3.5) with calls, or any other non-None value."""
    if hook is None:
        return False
    return bool(hook.calls) if _HOOK_CHAIN is not None and isinstance(hook, _HOOK_CHAIN) else True


def _option_reader():
    """A function returning the current values of the compile-option settings this Triton has."""
    getters = []
    for namespace, names in _OPTION_KNOBS.items():
        obj = getattr(_KNOBS, namespace, None)
        present = [n for n in names if obj is not None and hasattr(obj, n)]
        if present:
            getters.append((obj, operator.attrgetter(*present)))
    return lambda: tuple([get(obj) for obj, get in getters])


class UnspecializedKernel:
    """``kernel[grid](*args, **constexprs)`` as with a ``@triton.jit`` kernel.
    The runtime arguments come first and positionally, the constexprs last by
    name (no launch options such as num_warps)."""

    def __init__(self, fn):
        params = list(inspect.signature(fn).parameters.values())
        is_constexpr = ["constexpr" in str(p.annotation) for p in params]
        runtime = [p.name for p, c in zip(params, is_constexpr) if not c]
        if is_constexpr != sorted(is_constexpr):
            raise TypeError(f"{fn.__name__}: constexpr parameters must come after the runtime ones")
        self.jit = triton.jit(fn, do_not_specialize=runtime, do_not_specialize_on_alignment=runtime)
        self._constexpr_names = tuple(p.name for p, c in zip(params, is_constexpr) if c)
        self._num_runtime = len(runtime)
        self._knobs = getattr(_KNOBS, "runtime", None)
        interpret = triton_interprets()
        self._direct = not interpret and self._knobs is not None
        if not self._direct and not interpret:
            _log.debug("%s: launched through Triton each time: triton.knobs.runtime is missing", fn.__name__)
        self._options = _option_reader()
        self._pre_run_hooks = getattr(self.jit, "pre_run_hooks", ())  # the list Triton appends to
        # key -> (launcher, function, packed metadata, constexpr values, the compiled kernel, kept so that its
        # module stays loaded) or None
        self._compiled: dict = {}
        functools.update_wrapper(self, fn)

    def __getitem__(self, grid):
        return functools.partial(self._launch, grid)

    def _launch(self, grid, *args, **constexprs):
        knobs = self._knobs
        kinds = tuple(map(_kind, args))
        if (not self._direct or callable(grid) or _UNKEYED in kinds or self._pre_run_hooks
                or _hooked(knobs.launch_enter_hook) or _hooked(knobs.launch_exit_hook)):
            self.jit[grid](*args, **constexprs)
            return
        device = torch.cuda.current_device()
        key = (device, self._options(), *constexprs.items(), *kinds)
        entry = self._compiled.get(key, _MISSING)
        if entry is _MISSING:
            self._compiled[key] = self._first_launch(grid, args, constexprs)
        elif entry is None:
            self.jit[grid](*args, **constexprs)
        else:
            run, function, metadata, tail, _ = entry
            g = (*grid, 1, 1)
            run(g[0], g[1], g[2], torch._C._cuda_getCurrentRawStream(device), function, metadata,
                None, None, None, *args, *tail)

    def _first_launch(self, grid, args, constexprs):
        """Launch through Triton; return what later launches of the same key
        call, or None where they must go through Triton too."""
        compiled = self.jit[grid](*args, **constexprs)
        if len(args) != self._num_runtime or set(constexprs) != set(self._constexpr_names):
            return self._through_triton("the call binds arguments by default or passes launch options")
        try:
            compiled._init_handles()
            run, function, metadata = compiled.run, compiled.function, compiled.packed_metadata
        except AttributeError as e:
            return self._through_triton(f"the compiled kernel has no launcher as expected ({e})")
        return run, function, metadata, tuple(constexprs[name] for name in self._constexpr_names), compiled

    def _through_triton(self, why: str) -> None:
        _log.debug("%s: launched through Triton each time: %s", self.__name__, why)


def unspecialized_jit(fn) -> UnspecializedKernel:
    return UnspecializedKernel(fn)
