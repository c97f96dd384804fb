"""Whether a loaded package has the engine a call needs, decided before the call.

A partition whose lowered graph differs with its input shapes (a shape-specific constant) has one engine per
exported shape, not one for the range. A call inside the exported ranges at a size nobody listed then reached
such a partition inside AOTInductor's code: the runtime raised EngineNotInPackage there, and AOTInductor printed
its own C++ error line to stderr before the error reached the caller. The manifest records each partition's
input sizes as expressions of the model's input sizes (``input_shapes``, ``size_exprs``), so the signature a
call will ask for is worked out here from the input shapes alone, and a missing engine is the same clear error,
raised before anything runs.

Expressions are read with a small evaluator (integers, + - * // % **, and the few sympy functions torch's shape
expressions use), never with ``eval``. A partition whose expressions it cannot read, or that names a size no
model input gives (data-dependent sizes), is left to the runtime's own check, as before.
"""
from __future__ import annotations

import ast
import operator
from typing import Callable, Optional, Sequence

from ..engines.shapes import signature_text

_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv,
           ast.Mod: operator.mod, ast.Pow: operator.pow}
# torch.utils._sympy.functions and sympy names as str() writes them, on ints (sizes are never negative here).
_FUNCTIONS: dict[str, Callable[..., int]] = {
    "Max": max, "Min": min, "Abs": abs,
    "FloorDiv": operator.floordiv, "CleanDiv": operator.floordiv,
    "CeilDiv": lambda a, b: -(-a // b), "Mod": operator.mod, "PythonMod": operator.mod,
    "ModularIndexing": lambda x, d, m: (x // d) % m,
}
_CACHE_LIMIT = 256  # shape tuples remembered (a call at a known shape is one dict lookup)


class Unreadable(ValueError):
    """An expression outside what ``_evaluate`` reads."""


def _evaluate(node: ast.AST, sizes: dict) -> int:
    if isinstance(node, ast.Expression):
        return _evaluate(node.body, sizes)
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    if isinstance(node, ast.Name) and node.id in sizes:
        return sizes[node.id]
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        return _BINARY[type(node.op)](_evaluate(node.left, sizes), _evaluate(node.right, sizes))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_evaluate(node.operand, sizes)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCTIONS \
            and not node.keywords:
        return int(_FUNCTIONS[node.func.id](*(_evaluate(a, sizes) for a in node.args)))
    raise Unreadable(ast.dump(node))


class _Partition:
    def __init__(self, entry: dict, symbols: set):
        self.name = entry["name"]
        self.signatures = frozenset(entry["signatures"])
        # Each size as an int, or a parsed expression; raises Unreadable for what the evaluator cannot read.
        self.shapes = [[self._parse(s, symbols) for s in shape] for shape in entry["input_shapes"]]
        self.sizes = [self._parse(s, symbols) for s in entry["size_exprs"]]

    @staticmethod
    def _parse(size, symbols: set):
        if isinstance(size, int):
            return size
        tree = ast.parse(str(size), mode="eval")
        unbound = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} - symbols - set(_FUNCTIONS)
        if unbound:
            raise Unreadable(f"sizes no model input gives: {sorted(unbound)}")
        return tree

    def signature(self, bound: dict) -> str:
        def value(s):
            return s if isinstance(s, int) else _evaluate(s, bound)
        return signature_text([[value(s) for s in shape] for shape in self.shapes], [value(s) for s in self.sizes])


class EngineCheck:
    """Built once at load from the manifest. ``missing(shapes, inputs)``: None when every engine-per-shape
    partition has the engine these inputs need, else (partition name, signature) of the first that does not."""

    def __init__(self, inputs: Sequence[dict], partitions: Sequence[dict]):
        # symbol -> (input index, dim): where a call's inputs give each size the expressions name
        self._where = {}
        for k, entry in enumerate(inputs):
            for d, spec in enumerate(entry.get("dims") or ()):
                if isinstance(spec, dict) and "symbol" in spec:
                    self._where.setdefault(spec["symbol"], (k, d))
        self._partitions = []
        for entry in partitions:
            # Partitions with an engine for a range, or static ones (their engine serves every call), and
            # manifests written before size_exprs existed: the runtime checks them, as before.
            if entry.get("ranges") or not entry.get("symbolic") or entry.get("size_exprs") is None:
                continue
            try:
                self._partitions.append(_Partition(entry, set(self._where)))
            except (Unreadable, SyntaxError, KeyError, TypeError):
                continue
        self.active = bool(self._partitions)
        self._seen: dict = {}  # input shapes -> None or (partition name, signature)

    def missing(self, shapes: tuple, inputs) -> Optional[tuple[str, str]]:
        """``shapes``: the inputs' shapes as a tuple of tuples (the caller has built it)."""
        if shapes in self._seen:
            return self._seen[shapes]
        bound = {sym: int(inputs[k].shape[d]) for sym, (k, d) in self._where.items()}
        found = None
        for part in self._partitions:
            try:
                signature = part.signature(bound)
            except (Unreadable, ZeroDivisionError, ValueError, TypeError):
                continue  # the runtime decides
            if signature not in part.signatures:
                found = (part.name, signature)
                break
        if len(self._seen) < _CACHE_LIMIT:
            self._seen[shapes] = found
        return found
