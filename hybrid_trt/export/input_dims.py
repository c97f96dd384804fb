"""The input dimensions a package was exported for, written into its manifest and checked before each call.

A dynamic package's compiled code runs every size inside the exported ranges; AOTInductor's runtime does not
check its inputs, so a size outside them (or a wrong static size) reached the kernels: a delegate then failed
deep inside the call (AOTInductor printing its own error line to stderr on the way) and an Inductor kernel could
read past its buffer. Checking the sizes here, before the call, turns each into one clear error.

Each input's entry in the manifest: ``"dims": [3, {"symbol": "s0", "min": 1, "max": 8}, ...]``, an int for a
static size, the symbol and its range for a dynamic one. A size torch.export derived from others (``2*s0``) is
written as ``{"expr": "2*s0"}`` and not checked here (the runtimes still check what they are given).
"""
from __future__ import annotations

from typing import Optional, Sequence

from ..capture.bounds import finite


def describe(shape, ranges) -> list:
    """The manifest's ``dims`` of one traced input: ``shape`` its (symbolic) sizes, ``ranges`` torch.export's
    ``range_constraints``."""
    out = []
    for size in shape:
        if isinstance(size, int):
            out.append(int(size))
            continue
        expr = size.node.expr
        r = ranges.get(expr) if expr.is_Symbol else None
        if r is None or not (finite(r.lower) and finite(r.upper)):
            out.append({"expr": str(expr)})
        else:
            out.append({"symbol": str(expr), "min": int(r.lower), "max": int(r.upper)})
    return out


class DimCheck:
    """Built once at load from the manifest's inputs; ``problem(inputs)`` is None or what is wrong."""

    def __init__(self, inputs: Sequence[dict]):
        self._names = [i["name"] for i in inputs]
        # (input index, dim, kind, value, where): kind "size" (static) or "symbol" (value: (name, min, max)); where:
        # the dimension as messages name it (made here: a call that passes its checks builds nothing)
        self._checks = []
        for k, entry in enumerate(inputs):
            for d, spec in enumerate(entry.get("dims") or ()):
                where = f"input {self._names[k]!r} dimension {d}"
                if isinstance(spec, int):
                    self._checks.append((k, d, "size", spec, where))
                elif "symbol" in spec:
                    self._checks.append((k, d, "symbol", (spec["symbol"], spec["min"], spec["max"]), where))
        self.active = bool(self._checks)
        # A symbol is named in messages only where dimensions share it (they must be equal); alone, its range
        # says everything, and the name (Dynamo's, e.g. s77) means nothing to a user.
        symbols = [spec["symbol"] for entry in inputs for spec in entry.get("dims") or ()
                   if not isinstance(spec, int) and "symbol" in spec]
        self._shared = {s for s in symbols if symbols.count(s) > 1}

    def problem(self, inputs) -> Optional[str]:
        seen = None  # shared symbol -> (size, where it was first read)
        for k, d, kind, value, where in self._checks:
            size = inputs[k].size(d)
            if kind == "size":
                if size != value:
                    return f"{where} is {size}, but the package was exported with it fixed at {value}"
                continue
            name, lo, hi = value
            if not lo <= size <= hi:
                named = f" of its size {name}" if name in self._shared else ""
                return f"{where} is {size}, outside the exported range [{lo}..{hi}]{named}"
            if name in self._shared:
                seen = {} if seen is None else seen
                first_size, first_where = seen.setdefault(name, (size, where))
                if first_size != size:
                    return (f"{where} is {size} and {first_where} is {first_size}, but the package was exported "
                            f"with both as one size {name} [{lo}..{hi}]: they must be equal")
        return None

    def spec_text(self, inputs: Sequence[dict]) -> str:
        """e.g. ``image=s0:[1..4]x3x16x16, features=s0:[1..4]x6`` (the command line's ``--shape`` spelling, a
        dynamic size as its range, named by its symbol where dimensions share it), and a note when they do.
        ``inputs``: the manifest entries this check was built from."""
        parts = []
        for entry in inputs:
            dims = []
            for spec in entry.get("dims") or ():
                if isinstance(spec, int):
                    dims.append(str(spec))
                elif "symbol" in spec:
                    named = f"{spec['symbol']}:" if spec["symbol"] in self._shared else ""
                    dims.append(f"{named}[{spec['min']}..{spec['max']}]")
                else:
                    dims.append(f"[{spec['expr']}]")
            parts.append(f"{entry['name']}={'x'.join(dims)}")
        shared = sorted(self._shared)
        note = f" (dimensions sized by one symbol, {', '.join(shared)}, must be equal)" if shared else ""
        return ", ".join(parts) + note


def shapes_text(case) -> str:
    """Input shapes as messages write them: ``[1x3x224x224, 1x5]``."""
    return "[" + ", ".join("x".join(map(str, t.shape)) for t in case) + "]"
