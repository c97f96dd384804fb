"""Registry of delegates (external compilers). Order of registration is the default priority order.

A delegate turns a lowered partition into an engine (``build``) and an engine into bytes and back
(``serialize``/``load``); it never touches disk itself (the engine store in ``engines/`` does). Each delegate
owns its settings: ``options_from`` picks the ones it reads out of the options object, and only that dict
reaches ``build``/``load`` and the engine's content key.
"""
from __future__ import annotations

import abc
import functools
from typing import Any, Callable, Mapping, Optional, Sequence

import onnx
import torch

from ..log import logger
from ..lowerings.context import GENERIC


class Engine(abc.ABC):
    """A built engine for one partition and one input-shape signature. ``__call__`` is on the hot path."""

    # The shared build cache (``Delegate.build_cache_name``) as this build left it, for the store to keep.
    build_cache: Optional[bytes] = None

    @abc.abstractmethod
    def __call__(self, inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]: ...


class Delegate(abc.ABC):
    name: str = ""
    # What this delegate's runtime executes; the partitioner intersects these with each lowering's own checks.
    dtypes: frozenset = frozenset()
    domains: frozenset = frozenset({""})
    device_types: frozenset = frozenset({"cpu"})
    # Values of the ``precision`` option it builds engines at; "fp32" means the model's own dtypes.
    precisions: frozenset = frozenset({"fp32"})

    @abc.abstractmethod
    def unavailable_reason(self) -> Optional[str]:
        """None when usable on this machine; otherwise what is missing and how to get it."""

    def node_unsupported_reason(self, node) -> Optional[str]:
        """Limits of this delegate's runtime beyond dtypes and domains (e.g. kernels missing for one op in one
        dtype); None when it can run ``node``. Checked after the lowering registry accepted the node."""
        return None

    def unusable_with(self, delegate_options: Mapping[str, Any]) -> Optional[str]:
        """Why this delegate, usable here, cannot run with its options (``options_from``'s): e.g. a provider its
        library lacks. None when it can. Read where the delegates are resolved, as ``unavailable_reason``."""
        return None

    def options_from(self, options) -> dict[str, Any]:
        """The settings of ``options`` (a ``hybrid_trt.Options``) this delegate reads, resolved (no "auto" left
        that depends on the process): exactly what ``build``/``load`` receive and what an engine's key covers."""
        return {}

    def library_version(self) -> str:
        """Version of the library that builds and runs the engines (part of every engine's key)."""
        return "none"

    def lowering_target(self, device: torch.device, delegate_options: Mapping[str, Any]) -> str:
        """What runs this delegate's models on ``device``, for the lowerings whose fastest exact form depends on the
        kernels (``hybrid_trt.lowerings.context``): GENERIC (ONNX semantics only) unless the delegate knows."""
        return GENERIC

    def capture_unsafe_reason(self, device: torch.device, delegate_options: Mapping[str, Any]) -> Optional[str]:
        """None when a run of this delegate's engines on ``device`` can be captured in a CUDA graph (kernels on
        PyTorch's current stream or a stream joined to it by events, no host synchronisation, no allocation
        outside the caching allocator once warmed up); else why not. hybrid_trt/cudagraphs.py also probes each
        static engine once. Undeclared delegates run between the captured segments."""
        return f"delegate {self.name!r} does not declare CUDA-graph capture safety"

    def host_synchronizes(self, device: torch.device, delegate_options: Mapping[str, Any]) -> bool:
        """Whether an uncaptured run of this delegate's engines on a GPU ``device`` blocks the host until its GPU
        work is done. Such a run stops the host from queueing the rest of the call while the GPU works, which
        timing the partition alone cannot see: measured placement charges for it (placement.py)."""
        return False

    def build_cache_name(self, device: torch.device, delegate_options: Mapping[str, Any]) -> Optional[str]:
        """The name of a cache that all of this delegate's builds on ``device`` share and extend (TensorRT's timing
        cache: tactic timings of layers, valid for one library version and GPU), or None for none. When named, the
        engine store passes its bytes to ``build(..., build_cache=...)`` (None the first time) and keeps the
        built engine's ``build_cache``. A file-name-safe name that changes with whatever invalidates the cache."""
        return None

    @abc.abstractmethod
    def build(self, model: onnx.ModelProto, output_metas: Sequence[torch.Tensor], device: torch.device,
              delegate_options: Mapping[str, Any], keep_serialized: bool = False) -> Engine:
        """An engine for ``model``; ``keep_serialized``: ``serialize`` will be called on it (keep the bytes)."""

    def serialize(self, engine: Engine) -> dict[str, bytes]:
        """The files ``load`` rebuilds ``engine`` from (file names: letters, digits, ``._-``). Called once, right
        after a ``build(..., keep_serialized=True)``."""
        raise NotImplementedError(f"delegate {self.name!r} cannot serialize its engines")

    def deploy_files(self, names) -> set:
        """Of the file names ``serialize`` wrote, those ``load`` needs (an exported package ships only these;
        the engine cache keeps them all)."""
        return set(names)

    def load(self, files: Mapping[str, bytes], output_metas: Sequence[torch.Tensor], device: torch.device,
             delegate_options: Mapping[str, Any]) -> Engine:
        """The engine ``serialize`` wrote ``files`` for, without building it again."""
        raise NotImplementedError(f"delegate {self.name!r} cannot load stored engines")


_DELEGATES: dict[str, Delegate] = {}


def register_delegate(delegate: Delegate) -> Delegate:
    if delegate.name in _DELEGATES:
        raise ValueError(f"delegate {delegate.name!r} is already registered")
    _DELEGATES[delegate.name] = delegate
    return delegate


def accept_domain(delegate_name: str, domain: str) -> None:
    """Let a delegate take nodes of a custom ONNX domain (plugins register theirs here)."""
    d = _DELEGATES[delegate_name]
    d.domains = frozenset(d.domains | {domain})


def get_delegate(name: str) -> Delegate:
    return _DELEGATES[name]


def delegate_names() -> tuple[str, ...]:
    return tuple(_DELEGATES)


def available_delegates() -> tuple[str, ...]:
    reasons = {n: d.unavailable_reason() for n, d in _DELEGATES.items()}
    usable = tuple(n for n, why in reasons.items() if why is None)
    if not usable:
        _warn_once("hybrid_trt: no delegate is usable here, so every graph compiles with Inductor alone: "
                   + "; ".join(f"{n}: {why}" for n, why in reasons.items()))
    return usable


def usable_of(names: Sequence[str], strict: bool, options=None) -> tuple[str, ...]:
    """The delegates of ``names`` usable here (with ``options``: as configured there, ``Delegate.unusable_with``).
    One whose library is missing or broken, or lacks what the options ask for, raises under ``strict``; otherwise
    it is left out with one warning per process and graphs compile with the rest, Inductor alone when none is
    left: a missing library never fails a compile, named or not."""
    missing = {n: why for n in names if (why := _DELEGATES[n].unavailable_reason()
                                         or (options is not None
                                             and _DELEGATES[n].unusable_with(_DELEGATES[n].options_from(options))))}
    if missing:
        what = "; ".join(f"{n!r} is not usable here: {why}" for n, why in missing.items())
        if strict:
            raise ValueError(f"hybrid_trt option 'delegates': {what} (strict=True, so nothing compiles without it)")
        rest = [n for n in names if n not in missing]
        _warn_once(f"hybrid_trt option 'delegates': {what}; graphs compile with "
                   f"{', '.join(rest) if rest else 'Inductor alone'} instead (strict=True raises)")
    return tuple(n for n in names if n not in missing)


def honouring_precision(names: Sequence[str], precision: str, named: bool, strict: bool) -> tuple[str, ...]:
    """The delegates of ``names`` (usable here) that build engines at ``precision``.

    ``named`` (the ``delegates`` option lists them): one that cannot is a contradiction in the options, and
    raises. Otherwise those that cannot are left out (ONNX Runtime, which runs the model's own dtypes, beside
    TensorRT); when that leaves none (a machine without TensorRT), graphs compile with Inductor alone, with one
    warning, and ``strict`` raises: the same options then work on a development box and on the target."""
    if precision == "fp32":
        return tuple(names)
    cannot = [n for n in names if precision not in _DELEGATES[n].precisions]
    able = [n for n, d in _DELEGATES.items() if precision in d.precisions]
    if named and cannot:
        raise ValueError(f"hybrid_trt option 'precision'={precision!r} is not supported by the "
                         f"{', '.join(cannot)} delegate, which runs partitions in the model's own dtypes; use "
                         f"precision='fp32', or delegates={able!r}")
    left = tuple(n for n in names if n not in cannot)
    if not left and names:
        why = "; ".join(f"{n}: {_DELEGATES[n].unavailable_reason() or 'usable'}" for n in able)
        what = (f"option 'precision'={precision!r}: only {', '.join(able)} builds {precision} engines, and it is "
                f"not usable here ({why})")
        if strict:
            raise ValueError(f"hybrid_trt {what} (strict=True, so nothing compiles without it)")
        _warn_once(f"hybrid_trt {what}; graphs compile with Inductor alone, in the model's own dtypes "
                   "(strict=True raises)")
    return left


@functools.cache
def _warn_once(message: str) -> None:
    # Options are resolved for every graph; the user needs to hear about a missing library once per process.
    logger.warning("%s", message)


def dtype_declined(delegate_name: str, dtype: torch.dtype, where: str = "") -> str:
    """The reason a delegate declines a node for its dtype (``where``: e.g. "on the CPU provider (why)"), in the
    one form ``partitioner.capability.declined_for_dtype_or_device`` reads back as the model's setting rather than
    a lowering hybrid_trt lacks."""
    return f"{delegate_name}: dtype {str(dtype).replace('torch.', '')} not supported" + (f" {where}" if where else "")


def import_failure(import_library: Callable[[], Any], name: str, install: str, needs: str) -> Optional[str]:
    """Why a delegate's library is unusable (None when ``import_library()`` returns a module that has ``needs``).

    A broken install fails at import in many ways besides a missing package (a missing shared library, an ABI
    mismatch, a half-removed package, an exception in its ``__init__``); each one makes the delegate unavailable
    with its cause, so compilation goes on through Inductor instead of failing."""
    try:
        module = import_library()
    except ModuleNotFoundError as e:
        if e.name == name:
            return f"{name} is not installed ({install})"
        return f"{name} is installed but failed to import ({type(e).__name__}: {e}); reinstall it ({install})"
    except Exception as e:  # noqa: BLE001 - whatever a broken library raises, it is unavailable, not fatal
        return f"{name} is installed but failed to import ({type(e).__name__}: {e}); reinstall it ({install})"
    if not hasattr(module, needs):
        where = getattr(module, "__file__", None) or list(getattr(module, "__path__", []))
        return f"{name} at {where} is incomplete (it has no {needs}); reinstall it ({install})"
    return None
