"""Registry of delegates (external compilers). Order of registration is the default priority order."""
from __future__ import annotations

import abc
from typing import Optional, Sequence

import onnx
import torch


class Engine(abc.ABC):
    """A built engine for one partition and one input-shape signature. ``__call__`` is on the hot path."""

    @abc.abstractmethod
    def __call__(self, inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]: ...


class Delegate(abc.ABC):
    name: str = ""
    # What this delegate's runtime executes; the partitioner intersects these with each lowering's own checks.
    dtypes: frozenset = frozenset()
    domains: frozenset = frozenset({""})
    device_types: frozenset = frozenset({"cpu"})

    @abc.abstractmethod
    def unavailable_reason(self) -> Optional[str]:
        """None when usable on this machine; otherwise what is missing and how to get it."""

    def node_unsupported_reason(self, node) -> Optional[str]:
        """Limits of this delegate's runtime beyond dtypes and domains (e.g. kernels missing for one op in one
        dtype); None when it can run ``node``. Checked after the lowering registry accepted the node."""
        return None

    def validate(self, options) -> None:
        """Raise ValueError for option combinations this delegate cannot honour (checked at compile time)."""

    @abc.abstractmethod
    def build(self, model: onnx.ModelProto, output_metas: Sequence[torch.Tensor], device: torch.device,
              options) -> Engine: ...


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
    return tuple(n for n, d in _DELEGATES.items() if d.unavailable_reason() is None)
