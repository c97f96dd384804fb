"""Whole-graph entries: what lets Inductor's caches serve a hybrid graph safely.

Inductor's AOTAutograd cache keys the graph Dynamo captured, before hybrid_trt partitions it, so on its own it
cannot tell a hybrid compile from a plain-Inductor one, nor one set of weights from another (plain Inductor does
not bake weights in; hybrid_trt's engines do). The backend therefore compiles under
``torch.compiler.config.cache_key_tag`` = the ``tag`` below, which enters both the AOTAutograd and the FX-graph
cache keys (``FxGraphHashDetails.cache_key_tag``). It names hybrid_trt and holds

- the graph key: a hash of the captured graph's code, its input specs, the weights by content, the options that
  change what is compiled, the lowerings registered (those of plugins the graph calls, not of others), hybrid_trt's own source files and
  each delegate's environment;
- a salt stored in the graph's manifest. A stored compiled graph calls engines by key; if any of them left the
  engine store (evicted, deleted, corrupt), the manifest is incomplete, a new salt is drawn, and Inductor's
  stale entry is never hit again.

The manifest (one store entry under ``graph-<graph key>``) lists the graph's partitions with their keys and
report rows. On a warm start the backend loads every engine it lists before Inductor's cache is consulted, so
a cache hit runs with no build and no lowering, and the report is complete.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import pathlib
import time
import uuid
from typing import Callable, Optional

import torch
import torch.fx as fx

from ..log import logger
from ..report import CompileReport, InductorOp, PartitionReport
from .key import environment
from .runtime import Policy, load_runtime
from .store import EngineStore

MANIFEST = "manifest.json"
_FORMAT = 2  # 2: per_call (the backend's direct-call plan and baked weights)


def graph_key(gm: fx.GraphModule, example_inputs, weights: dict, options, ranges: tuple = ()) -> str:
    """Hash of everything that decides the hybrid compile of ``gm`` (see the module doc); ``ranges``: the declared
    ranges of its dynamic dims (capture/bounds.py), which decide engines per range or per shape."""
    from .. import __version__
    from ..lowerings.registry import registered_targets
    from ..plugins.registry import foreign_targets
    device = next((x.device for x in example_inputs if isinstance(x, torch.Tensor)), torch.device("cpu"))
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    header = {
        "format": _FORMAT, "hybrid_trt": __version__, "torch": torch.__version__, "code": gm.code,
        "inputs": [_spec(n.meta.get("example_value", n.meta.get("val"))) for n in placeholders],
        "ranges": list(ranges),
        "example_inputs": [_spec(x) for x in example_inputs],
        "options": options.compiled_fields(), "delegates": options.resolved_delegates(),
        "lowerings": sorted(str(t) for t in registered_targets() - foreign_targets(gm.graph)),
        "source": package_source_hash(),
        "environments": {name: environment(name, device) for name in options.resolved_delegates()},
    }
    h = hashlib.sha256(json.dumps(header, sort_keys=True, default=str).encode())
    tensors = [(f"input {i}", weights[i]) for i in sorted(weights)]
    tensors += [(n.target, getattr(gm, n.target)) for n in gm.graph.nodes if n.op == "get_attr"]
    for name, t in tensors:
        if isinstance(t, torch.Tensor):
            h.update(f"{name} {_spec(t)}".encode())
            h.update(_tensor_bytes(t))
    return h.hexdigest()


@functools.lru_cache(maxsize=1)
def package_source_hash() -> str:
    """Hash of hybrid_trt's own source files, once per process (about 1 ms). A change to a lowering, the partitioner
    or the stitcher changes what a graph compiles to, and a development tree keeps its version number across such
    changes: without this, a warm cache kept serving graphs whose engines the old lowering had built."""
    root = pathlib.Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        h.update(str(path.relative_to(root)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def _spec(x) -> str:
    if isinstance(x, torch.Tensor):
        return f"{list(map(str, x.shape))} {list(map(str, x.stride()))} {x.dtype} {x.device} {x.requires_grad}"
    return f"{type(x).__name__} {x}"


def _tensor_bytes(t: torch.Tensor):
    t = t.detach()
    if t.layout != torch.strided or t.is_quantized:
        return repr(t).encode()
    return memoryview(t.cpu().contiguous().reshape(-1).view(torch.uint8).numpy())


@dataclasses.dataclass
class GraphCache:
    """One compile's view of its graph entry: the tag to compile under and the runtimes already loaded."""
    store: EngineStore
    key: str
    salt: str
    complete: bool  # the manifest was found and every engine it lists loaded
    runtimes: dict  # content key -> PartitionRuntime, loaded from the manifest's entries
    partitions: list  # PartitionReport rows of the stored compile
    inductor_ops: list  # InductorOp rows of the stored compile
    per_call: dict = dataclasses.field(default_factory=dict)  # the backend's per-call plan (JSON, backend.py)

    @property
    def tag(self) -> str:
        from .. import __version__
        user = torch.compiler.config.cache_key_tag
        return (user + "|" if user else "") + f"hybrid_trt {__version__} graph {self.key} salt {self.salt}"

    def fill_report(self, report: CompileReport, inductor_cache: bool = True) -> None:
        """The report of a compile the stored manifest served: the stored rows, engines as loaded now.
        ``inductor_cache``: Inductor's cache served the compiled graph (False: the graph is called directly and
        Inductor was not consulted, see backend.py)."""
        report.partitions = self.partitions
        report.inductor_ops = self.inductor_ops
        report.from_graph_manifest = True
        report.from_inductor_cache = inductor_cache

    def save(self, report: CompileReport, runtimes: list, per_call: Optional[dict] = None) -> None:
        keys = {id(rt.report): rt for rt in runtimes}
        rows = []
        for p in report.partitions:
            rt = keys.get(id(p))
            row = dataclasses.asdict(p)
            row.pop("engines")
            row["key"] = None if rt is None or p.status != "delegated" else rt.key  # what the graph calls
            row["device"] = None if rt is None else str(rt.device)
            # Engines that each serve a range of shapes (bounded dynamic dims): a warm start loads them too, or
            # every shape of the range would build an engine of its own again.
            row["ranges"] = [] if rt is None else [key for _plan, key, _engine in rt.ranged]
            rows.append(row)
        manifest = {"format": _FORMAT, "salt": self.salt, "partitions": rows,
                    "inductor_ops": [dataclasses.astuple(op) for op in report.inductor_ops],
                    "per_call": per_call or {}}
        self.store.put(_entry_key(self.key), {MANIFEST: json.dumps(manifest).encode()}, {"kind": "graph"})


def open_graph(store: EngineStore, key: str, policy: Policy,
               before_loads: Optional[Callable[[Optional[dict]], None]] = None) -> GraphCache:
    """The graph entry of ``key``: with the manifest's engines loaded when it is complete, else a new salt.
    ``before_loads`` is called with the stored per-call plan (None when there is no usable manifest) before any
    engine is loaded, so that work the caller needs next can start beside the loads."""
    fresh = GraphCache(store, key, uuid.uuid4().hex, False, {}, [], [])
    announce = before_loads or (lambda per_call: None)
    entry = store.get(_entry_key(key))
    if entry is None:
        announce(None)
        return fresh
    try:
        manifest = json.loads(entry.files[MANIFEST])
        if manifest["format"] != _FORMAT:
            announce(None)
            return fresh
        rows = manifest["partitions"]
        inductor_ops = [InductorOp(*op) for op in manifest["inductor_ops"]]
        per_call = manifest.get("per_call") or {}  # absent in manifests written before it existed
    except (KeyError, ValueError, TypeError) as e:
        logger.debug("hybrid_trt: unreadable graph manifest %s (%s); compiling afresh", key, e)
        announce(None)
        return fresh
    announce(per_call)
    runtimes, partitions = {}, []
    for row in rows:
        content_key, device, ranges = row["key"], row.pop("device"), row.pop("ranges", [])
        report = PartitionReport(**row)
        partitions.append(report)
        if content_key is None:
            continue
        t0 = time.perf_counter()
        runtime = load_runtime(content_key, store, torch.device(device), policy, name=f"partition {report.index}",
                               report=report)
        if runtime is None:  # an engine left the store: Inductor's stored graph must not be used
            logger.info("hybrid_trt: engine of partition %d no longer stored; compiling the graph afresh",
                        report.index)
            return dataclasses.replace(fresh, runtimes=runtimes)
        try:
            for range_key in ranges:
                runtime.load_range(range_key)
        except Exception as e:  # noqa: BLE001 - a damaged or missing range engine: compile the graph afresh
            logger.info("hybrid_trt: range engine of partition %d not loadable (%s); compiling the graph afresh",
                        report.index, e)
            return dataclasses.replace(fresh, runtimes=runtimes)
        runtimes[content_key] = runtime
        logger.debug("hybrid_trt: partition %d loaded in %.3f s", report.index, time.perf_counter() - t0)
    return GraphCache(store, key, manifest["salt"], True, runtimes, partitions, inductor_ops, per_call)


def _entry_key(key: str) -> str:
    return f"graph-{key}"


@contextlib.contextmanager
def source_hashes_in_background():
    """Inductor's cache keys include hashes of torch's and Triton's installed sources (``codecache.torch_key``
    and ``triton_key``: every torch module and Triton's 500 MB library, 0.8 s on the 2-core CPU machine), computed
    once per process at the first cache lookup. Torch caches them with ``prefetch()``, which starts the
    computation in torch's own worker thread. Yields ``start``: called once it is known that Inductor will be
    consulted (a graph served by its direct call never is), it lets the hashes overlap with the engine loads
    that come before Inductor's lookup (file reads and sha256 release the GIL) instead of following them. On
    exit it waits for what was started, so nothing started here outlives the compile (a process forked later never
    inherits a half-done hash). A torch without ``prefetch`` computes them at the lookup as before."""
    from torch._inductor import codecache
    # Looked up by name: torch 2.11 has no codecache.triton_key (its hash lives elsewhere), 2.14 has both.
    found = (getattr(codecache, name, None) for name in ("torch_key", "triton_key"))
    candidates = [f for f in found if callable(getattr(f, "prefetch", None))]
    started: list = []

    def start() -> None:
        if started or not candidates:
            return
        started.extend(candidates)
        try:
            for f in candidates:
                f.prefetch()
        except RuntimeError as e:  # the worker pool is shut down (a compile during interpreter exit): hash at lookup
            logger.debug("hybrid_trt: cannot prefetch Inductor's source hashes: %s", e)

    try:
        yield start
    finally:
        for f in started:
            try:
                f()  # the cached value, or waits for the worker; Inductor has usually consumed it already
            except Exception as e:  # noqa: BLE001 - Inductor's own call reports it; never mask the compile's
                logger.debug("hybrid_trt: hashing torch's sources for Inductor's cache key failed: %s", e)
