"""Inductor passes that change a graph's results on some torch releases, switched off while hybrid_trt compiles.

Each entry names an Inductor setting, the defect, and how to tell whether the installed torch has it: by reading
the pass's own source for the fix (a version number would miss backports and nightlies). Where the source cannot
be read the setting is switched off, which only loses the pass's optimisation. Applied around every Inductor
compile hybrid_trt makes (torch.compile and export), as a config patch: the user's own settings are as before
afterwards, and Inductor's cache keys see the patch.
"""
from __future__ import annotations

import contextlib
import functools
import inspect
from typing import Callable, NamedTuple

from .log import logger


class _Fix(NamedTuple):
    setting: str      # the Inductor config switch that turns the pass off
    defect: str       # what it does wrong, for the debug log
    has_defect: Callable[[], bool]
    dynamic_only: bool = False  # the defect needs symbolic sizes: a static graph keeps the pass (and its speed)


def _source_lacks(module: str, function: str, fixed_marker: str) -> bool:
    """True when ``module.function`` exists and its source lacks ``fixed_marker``; also when it cannot be read."""
    try:
        mod = __import__(f"torch._inductor.fx_passes.{module}", fromlist=[function])
        fn = getattr(mod, function, None)
        if fn is None:
            return False  # no such pass in this torch: nothing to switch off
        return fixed_marker not in inspect.getsource(fn)
    except (ImportError, OSError, TypeError):
        return True


_FIXES = (
    # torch 2.11 (and releases without the fix): full(...).scatter(dim, index, value) becomes
    # where(mask, value, fill) with Python scalars, which torch.where promotes to float32: a float16 one-hot came
    # back float32 (seen on the H200 and H100). Fixed upstream by a cast to the full's dtype (pytorch#186481).
    _Fix("optimize_scatter_upon_const_tensor", "full+scatter rewrite loses a float16/bfloat16 dtype",
         lambda: _source_lacks("joint_graph", "scatter_upon_const_tensor", ".to(dtype)")),
    # torch 2.11 (and releases without the fix): the matmul-padding heuristic on a GPU evaluates its
    # compute-bound test on symbolic sizes, which adds a guard on the size (e.g. (32*n)/(32 + 12*n) > 0.0556, its
    # threshold from the GPU's throughput): a dimension marked dynamic with bounds then fails with
    # ConstraintViolationError. Later releases read the sizes' hints instead.
    _Fix("shape_padding", "matmul padding guards on dynamic sizes",
         lambda: _source_lacks("pad_mm", "_should_pad", "optimization_hint"), dynamic_only=True),
)


@functools.lru_cache(maxsize=None)
def defective_settings(dynamic: bool) -> dict:
    """The Inductor settings to switch off on this torch ({} on a torch without these defects) for a graph with
    (``dynamic``) or without symbolic sizes. Read once: the installed torch does not change within a process."""
    from torch._inductor import config
    fixes = [f for f in _FIXES if (dynamic or not f.dynamic_only) and hasattr(config, f.setting) and f.has_defect()]
    for f in fixes:
        logger.debug("hybrid_trt: Inductor's %s is off while hybrid_trt compiles (this torch: %s)", f.setting, f.defect)
    return {f.setting: False for f in fixes}


def has_symbolic_sizes(example_inputs) -> bool:
    """Whether a graph's example inputs (tensors, SymInts, other values) carry a symbolic size."""
    import torch
    return any(isinstance(v, torch.SymInt) or (isinstance(v, torch.Tensor)
                                                and any(isinstance(d, torch.SymInt) for d in v.shape))
               for v in example_inputs)


@contextlib.contextmanager
def inductor_defects_avoided(dynamic: bool):
    """Inductor compiles inside this block run without the passes that are defective on this torch (for a graph
    with symbolic sizes when ``dynamic``)."""
    patch = defective_settings(bool(dynamic))
    if not patch:
        yield
        return
    from torch._inductor import config
    with config.patch(patch):
        yield
