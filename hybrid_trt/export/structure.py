"""The structure of nested inputs and outputs in a package's manifest: torch's pytree spec as JSON, namedtuples
apart.

torch's spec serializer refuses a namedtuple not registered under a name (through a private torch function), and
torch's own structseqs (``torch.return_types.topk``, what ``torch.topk`` returns); the class may not exist where
the package is loaded either. So a namedtuple is written as a tuple, with its type name and fields beside the spec,
and comes back as a namedtuple of that name and fields: a class made once at load, so attribute and index access
work as on the model's output, and ``isinstance`` with the model's class does not.
"""
from __future__ import annotations

import collections
from typing import Any, Callable, Optional

import torch.utils._pytree as pytree


def is_namedtuple(x) -> bool:
    """A namedtuple, or a structseq with named fields (``torch.topk``'s ``torch.return_types.topk``)."""
    return isinstance(x, tuple) and _fields(type(x)) is not None


def _fields(cls) -> Optional[tuple]:
    fields = getattr(cls, "_fields", None)
    if fields is None and hasattr(cls, "n_sequence_fields"):  # a structseq: its field names for pattern matching
        fields = getattr(cls, "__match_args__", None)
    return tuple(fields) if fields is not None else None


def plain(x):
    """``x`` with every namedtuple a tuple (the rest as it is)."""
    if is_namedtuple(x):
        return tuple(plain(v) for v in x)
    if type(x) in (tuple, list):
        return type(x)(plain(v) for v in x)
    if isinstance(x, dict):
        return _dict_like(x, ((k, plain(v)) for k, v in x.items()))
    return x


def keys_ordered_like(x, template):
    """``x`` with each dict whose keys are the same as ``template``'s dict at that place put in the template's key
    order (a pytree spec records insertion order; a dict built in another order is the same input)."""
    if isinstance(x, dict) and isinstance(template, dict) and set(x) == set(template):
        return _dict_like(x, ((k, keys_ordered_like(x[k], template[k])) for k in template))
    if type(x) in (tuple, list) and type(template) in (tuple, list) and len(x) == len(template):
        return type(x)(keys_ordered_like(v, t) for v, t in zip(x, template))
    return x


def _dict_like(x: dict, items):
    if isinstance(x, collections.defaultdict):
        return type(x)(x.default_factory, items)
    return type(x)(items)


def describe(x) -> Optional[dict]:
    """Where ``x``'s namedtuples are and what they are: None when it has none (JSON-able)."""
    if is_namedtuple(x):
        return {"namedtuple": type(x).__name__, "fields": list(_fields(type(x))), "items": [describe(v) for v in x]}
    if isinstance(x, (tuple, list)):
        items = [describe(v) for v in x]
        return {"items": items} if any(d is not None for d in items) else None
    if isinstance(x, dict):
        values = [describe(v) for v in x.values()]
        return {"values": values} if any(d is not None for d in values) else None
    return None


def restorer(desc: Optional[dict]) -> Optional[Callable]:
    """A function putting back the namedtuples ``describe`` recorded into a value built from the plain spec (None
    when there are none). Built once, at load: the classes are made here, not per call."""
    if desc is None:
        return None
    if "namedtuple" in desc:
        # rename=True: the fields of a namedtuple made with rename=True ("_1") are refused otherwise
        cls = collections.namedtuple(desc["namedtuple"], desc["fields"], rename=True)
        parts = [restorer(d) for d in desc["items"]]
        return lambda x: cls(*(v if f is None else f(v) for v, f in zip(x, parts)))
    if "items" in desc:
        parts = [restorer(d) for d in desc["items"]]
        return lambda x: type(x)(v if f is None else f(v) for v, f in zip(x, parts))
    parts = [restorer(d) for d in desc["values"]]
    return lambda x: _dict_like(x, ((k, v if f is None else f(v)) for (k, v), f in zip(x.items(), parts)))


def dumps(spec) -> tuple[str, Optional[dict]]:
    """(the spec as torch's JSON, with namedtuples as tuples; their description or None)."""
    example = pytree.tree_unflatten(list(range(spec.num_leaves)), spec)
    desc = describe(example)
    return pytree.treespec_dumps(pytree.tree_structure(plain(example)) if desc else spec), desc


def unflatten(leaves: list, spec, restore: Optional[Callable]) -> Any:
    """The value of ``spec`` from ``leaves``, its namedtuples put back by ``restore`` (``restorer``'s)."""
    value = pytree.tree_unflatten(leaves, spec)
    return value if restore is None else restore(value)
