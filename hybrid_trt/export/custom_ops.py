"""The custom ops a package's AOTInductor graph calls, and the modules that define them.

AOTInductor calls a ``torch.library`` op defined in Python through the op's registration in the loading process,
so that process must have imported the module that defines it (a user's ``torch.library.custom_op``, or a
hybrid_trt plugin's ops). Export records each such op with its module; load imports the modules of hybrid_trt's
own plugins itself and, for any other op still missing, says which module to import, before AOTInductor would
fail with "Could not find schema".
"""
from __future__ import annotations

import importlib
import sys
from typing import Iterable, Optional

import torch

_BUILTIN_NAMESPACES = frozenset({"aten", "prims", "_c10d_functional", "c10d_functional", "higher_order"})


def used(graph: torch.fx.Graph) -> list[dict]:
    """``[{"op": "ns::name", "module": defining module or None}]`` for each custom op ``graph`` calls."""
    names = sorted({node.target._schema.name for node in graph.nodes
                    if node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload)
                    and node.target.namespace not in _BUILTIN_NAMESPACES})
    return [{"op": name, "module": defining_module(name)} for name in names]


def defining_module(qualname: str) -> Optional[str]:
    """The module whose import registers the op: a ``custom_op``'s function's module, else the module of the file
    its fake implementation was registered from; None when neither is known (e.g. an op defined in C++)."""
    try:
        from torch._library import simple_registry
        from torch._library.custom_ops import OPDEFS
    except ImportError:  # another torch: the op is recorded without its module
        return None
    opdef = OPDEFS.get(qualname)
    if opdef is not None:
        return opdef._init_fn.__module__
    kernel = simple_registry.singleton.find(qualname).fake_impl.kernel
    if kernel is None:
        return None
    path = kernel.source.rsplit(":", 1)[0]
    return next((name for name, mod in list(sys.modules.items()) if getattr(mod, "__file__", None) == path), None)


def missing(ops: Iterable[dict]) -> list[dict]:
    """The recorded ops this process does not have, after importing the modules of hybrid_trt's own plugins that
    define any of them (the package's own code, as ``import hybrid_trt`` is); other modules are the caller's to
    import, since importing a module named in a package file would run code the user did not ask for."""
    absent = [op for op in ops if not _registered(op["op"])]
    for module in sorted({op["module"] for op in absent if (op["module"] or "").startswith("hybrid_trt.")}):
        importlib.import_module(module)
    return [op for op in absent if not _registered(op["op"])]


def _registered(qualname: str) -> bool:
    namespace, name = qualname.split("::", 1)
    try:
        getattr(getattr(torch.ops, namespace), name.split(".", 1)[0])
    except (AttributeError, RuntimeError):
        return False
    return True
