"""How a package's outputs are checked against eager PyTorch's: by export on every listed shape, and by
``hybrid-trt verify`` against the outputs stored in the package.

By default element by element (``rtol``/``atol``). Some outputs are right and still differ that way: a top-k or a
sort over near-equal scores may order them otherwise in another precision (the example detector in float16 on a
GPU swaps whole boxes). For those the user gives a comparison of their own, ``compare(got, expected)``, which
replaces the element-wise check. The package records its name; ``verify`` never imports it from the manifest (the
check would then run code named by the file it is checking) but asks for it.
"""
from __future__ import annotations

import dataclasses
import importlib
import math
from typing import Callable, Optional, Sequence

import torch

DEFAULT_RTOL = 1e-3
DEFAULT_ATOL = 1e-4

# The first lines of a comparison's AssertionError (torch.testing.assert_close writes several).
_MESSAGE_LINES = 3


class ComparisonError(Exception):
    """The user's comparison failed (raised something other than AssertionError, or returned something other than
    a verdict): the message names it; the cause is chained."""


@dataclasses.dataclass(frozen=True)
class OutputCheck:
    """``compare``: None, or a function of two lists of CPU tensors (the package's flattened outputs, eager's) that
    returns None or True when they match, False or a message saying what differs when they do not, or raises
    AssertionError (``torch.testing.assert_close``) with that message."""
    rtol: float = DEFAULT_RTOL
    atol: float = DEFAULT_ATOL
    compare: Optional[Callable] = None

    def __post_init__(self):
        for name in ("rtol", "atol"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                    or value < 0:
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
        if self.compare is not None and not callable(self.compare):
            raise TypeError(f"compare must be a function (got, expected) -> None | bool | str, got "
                            f"{type(self.compare).__name__}")

    @property
    def compare_name(self) -> Optional[str]:
        """``module:qualname`` of the comparison (what ``--compare`` takes), None without one."""
        if self.compare is None:
            return None
        fn = self.compare
        return f"{getattr(fn, '__module__', '?')}:{getattr(fn, '__qualname__', type(fn).__name__)}"

    def named_as_itself(self) -> bool:
        """Whether ``compare_name`` leads back to the comparison (``--compare`` can give it to verify): False for a
        lambda, a local function, a ``functools.partial`` or a callable object."""
        if self.compare is None:
            return True
        module, _, qualname = self.compare_name.partition(":")
        try:
            obj = importlib.import_module(module)
            for part in qualname.split("."):
                obj = getattr(obj, part)
        except Exception:  # noqa: BLE001 - any failure to resolve it is the answer
            return False
        return obj is self.compare

    def describe(self) -> str:
        return f"by {self.compare_name}" if self.compare else f"rtol {self.rtol}, atol {self.atol}"

    def to_manifest(self) -> dict:
        return {"rtol": self.rtol, "atol": self.atol, "compare": self.compare_name}

    def problem(self, got: Sequence[torch.Tensor], expected: Sequence[torch.Tensor]) -> Optional[str]:
        """None when ``got`` matches ``expected``; else what differs. ComparisonError when the comparison itself
        fails."""
        if self.compare is None:
            return compare_outputs(got, expected, self.rtol, self.atol)
        try:
            verdict = self.compare([g.detach().cpu() for g in got], [e.detach().cpu() for e in expected])
        except AssertionError as e:
            lines = [line for line in str(e).strip().splitlines() if line.strip()][:_MESSAGE_LINES]
            return f"{self.compare_name}: {' '.join(lines) or 'AssertionError'}"
        except Exception as e:
            raise ComparisonError(f"the comparison {self.compare_name} raised {type(e).__name__}: {e}") from e
        if isinstance(verdict, str):
            return f"{self.compare_name}: {verdict}"
        if verdict is None:
            return None
        if _is_truth_value(verdict):  # True/False, numpy's bool, a one-element bool tensor
            return None if bool(verdict) else f"{self.compare_name} returned False"
        raise ComparisonError(f"the comparison {self.compare_name} returned a {type(verdict).__name__}; a "
                              "comparison returns None or True (match), False or a message (mismatch), or raises "
                              "AssertionError")

    def same_function_as(self, recorded: Optional[str]) -> bool:
        """Whether this check's comparison is the one a package recorded (by name; a script's ``__main__`` function
        may be imported under its module's name)."""
        if recorded is None or self.compare is None:
            return recorded is None and self.compare is None
        mine = self.compare_name
        return mine == recorded or (recorded.startswith("__main__:") and
                                    mine.split(":", 1)[1] == recorded.split(":", 1)[1])


def _is_truth_value(verdict) -> bool:
    if isinstance(verdict, bool):
        return True
    if type(verdict).__module__ == "numpy" and type(verdict).__name__ in ("bool", "bool_"):  # "bool_" before 2.0
        return True
    return isinstance(verdict, torch.Tensor) and verdict.dtype == torch.bool and verdict.numel() == 1


def compare_outputs(got: Sequence[torch.Tensor], expected: Sequence[torch.Tensor], rtol: float,
                    atol: float) -> Optional[str]:
    """None when ``got`` matches ``expected`` element by element; else what differs (first mismatch)."""
    if len(got) != len(expected):
        return f"{len(got)} outputs, expected {len(expected)}"
    for k, (g, e) in enumerate(zip(got, expected)):
        if g.shape != e.shape or g.dtype != e.dtype:
            return f"output {k}: {g.dtype}{list(g.shape)}, expected {e.dtype}{list(e.shape)}"
        g, e = g.cpu(), e.cpu()
        close = _close(g, e, rtol, atol)
        if not bool(close.all()):  # (sorted below: a permutation of the right values is worth saying so)
            bad = int((~close).sum())
            err = float((g.double() - e.double()).abs().max())
            text = f"output {k}: {bad}/{e.numel()} elements differ (max abs error {err:.3g}, rtol {rtol}, atol {atol})"
            if not e.is_complex() and bool(_close(g.flatten().sort().values, e.flatten().sort().values, rtol,
                                                  atol).all()):
                text += (" but hold the same values in another order (a top-k or sort over near-equal values can "
                         "order them otherwise)")
            return text
    return None


def _close(g: torch.Tensor, e: torch.Tensor, rtol: float, atol: float) -> torch.Tensor:
    if not e.dtype.is_floating_point:
        return g == e
    # atol relative to the output's magnitude, its finite values' (an infinity would make every tolerance infinite)
    finite = e[torch.isfinite(e)]
    scale = max(1.0, float(finite.abs().max())) if finite.numel() else 1.0
    return torch.isclose(g, e, rtol=rtol, atol=atol * scale, equal_nan=True)
