"""Partition runtimes addressed by content key: key -> engine(s), per-shape lookup, and Inductor as the fallback
that always completes.

The stitched graph calls ``hybrid_trt::delegate(key, inputs, sizes)`` (``engines/op.py``), and the key is
resolved through one in-process registry, the memory layer of the engine store. A registry miss (Inductor's
AOTAutograd cache handed back compiled code in a fresh process, or the runtime was released) is served from the
disk entry, which holds everything a fresh process needs: the engine bytes, the output metas and the partition's
recipe (its extracted FX module with its weights) for the Inductor fallback and for new shapes.

Entries (all in ``EngineStore``, see ``store.py``):
- a static partition: one entry under its ``engine_key`` holding the engine files (``engine.*``), the recipe
  (``recipe.pt``) and its output metas;
- a partition with symbolic sizes: the recipe under a partition key, and one entry per concrete input-shape
  signature under ``sha256(partition key, signature)``, so a stored shape loads without lowering it first;
- a range engine (``ranges.py``): one entry for a declared range of sizes, keyed by the range model's content;
- beside them, from other modules: the graph manifest (``graph.py``), placement verdicts (``placement.py``) and
  the delegates' shared build caches (TensorRT's timing cache, ``EngineStore.read_shared``).

A warm start reads an entry lazily (``EngineStore.get(lazy=True)``): the engine file the delegate loads is read
and checksummed; the recipe only when a fallback or a new shape needs it, the lowered model only when the
optimized one does not load. A package load (``Policy.deploy``) verifies every file at once.
"""
from __future__ import annotations

import copy
import dataclasses
import functools
import hashlib
import io
import json
import threading
import time
import weakref
from typing import Any, Callable, Iterator, Mapping, Optional, Sequence

import onnx
import torch
import torch.fx as fx
from torch._subclasses.fake_tensor import unset_fake_temporarily

from ..delegates import Engine, get_delegate
from ..log import TORCH_CPP_BUILDER, logger, notice_if_slow, quiet
from ..lowerings.to_onnx import lower_partition
from ..report import EngineRecord, PartitionReport
from . import ranges as _ranges
from .key import engine_key, environment
from .shapes import UnhintedSize, hint_shapes, input_spec, metas_from_json, metas_json, signature_text, size_expr
from .store import CorruptEntry, EngineStore, Entry, default_cache_dir

RECIPE = "recipe.pt"
_ENGINE_PREFIX = "engine."
_MEMO_LIMIT = 256  # shape signatures remembered per partition for engines that serve ranges of shapes


class DelegateBuildError(RuntimeError):
    pass


class BuildInDeployMode(RuntimeError):
    """Deploy mode (a loaded package, ``Policy.deploy``): something asked to lower, build or compile."""


class EngineNotInPackage(LookupError):
    """Deploy mode: an input shape the package holds no engine for."""


class EngineCallFailed(RuntimeError):
    """An engine failed on inputs eager PyTorch runs, where nothing falls back: ``strict``, or a loaded package."""


@dataclasses.dataclass(frozen=True)
class Policy:
    """The options a runtime reads (not the delegate's own: those are in ``delegate_options``)."""
    strict: bool = False
    max_engines: int = 8
    deploy: bool = False  # a loaded package (export/): any lowering, engine build or Inductor fallback raises
    # Declared finite ranges of dynamic dims, ((symbol, min, opt, max), ...): a symbolic partition that lowers
    # to the same graph across its range gets one engine for the range (ranges.py). Given by export, which
    # declares bounded dims; torch.compile those marked with bounds (capture/bounds.py). Unbounded: per shape.
    ranges: tuple = ()
    # Inductor settings for a partition's fallback, compiled at run time (Options.inductor_patches), as items.
    inductor_patches: tuple = ()


def engine_store(options) -> EngineStore:
    """The store ``options`` select: ``cache_dir`` (default ``$XDG_CACHE_HOME/hybrid_trt``), or disabled."""
    if not options.cache:
        return EngineStore(None)
    return _store_at(str(options.cache_dir or default_cache_dir()), options.cache_max_bytes)


@functools.lru_cache(maxsize=None)
def _store_at(root: str, max_bytes: int) -> EngineStore:
    # One store per cache directory and process, shared by every compile: a store reports each kind of problem
    # with its directory once (unwritable, a lock path taken), and a store per compile repeated the warning for
    # every graph, graph break and recompile of the process.
    return EngineStore(root, max_bytes)


# ---------------------------------------------------------------------------------------------- registry


class _Registry:
    """key -> live runtime. Weak: a runtime lives as long as the compiled code that holds it (the backend hangs
    them on the compiled function), so compiling many models does not pin their engines. The latest runtime of a
    key serves it; when that one is released while an older one of the same content lives, the older takes
    over (``all``). Runtimes loaded on a miss have no other owner and are held here (``loaded``).

    A miss (Inductor's cache served a graph calling a key no compile in this process prepared) is loaded once,
    under a lock, from the stores this process's compiles used, newest first (a ``cache_dir`` given as an option
    as well as the environment's), then from the environment's or default directory."""

    def __init__(self):
        self.live: "weakref.WeakValueDictionary[str, PartitionRuntime]" = weakref.WeakValueDictionary()
        self.all: "weakref.WeakSet[PartitionRuntime]" = weakref.WeakSet()
        self.loaded: dict[str, PartitionRuntime] = {}
        self.stores: dict = {}  # root -> EngineStore, in the order compiles last used them
        self._miss_lock = threading.Lock()

    def register(self, runtime: "PartitionRuntime") -> None:
        self.live[runtime.key] = runtime
        self.all.add(runtime)
        store = getattr(runtime, "store", None)
        if store is not None and store.root is not None and not store.read_only:
            self.stores.pop(store.root, None)
            self.stores[store.root] = store

    def resolve(self, key: str) -> "PartitionRuntime":
        runtime = self._live(key)
        if runtime is not None:
            return runtime
        with self._miss_lock:  # two threads missing one key load it once
            runtime = self._live(key)
            if runtime is None:
                runtime = _load_on_miss(key, list(reversed(self.stores.values())))
                self.loaded[key] = runtime
                self.register(runtime)
        return runtime

    def _live(self, key: str) -> Optional["PartitionRuntime"]:
        runtime = self.live.get(key)
        if runtime is not None:
            return runtime
        for other in list(self.all):
            if other.key == key:
                self.live[key] = other
                return other
        return None


REGISTRY = _Registry()


def _load_on_miss(key: str, stores: Sequence[EngineStore]) -> "PartitionRuntime":
    from ..options import make_options
    options = make_options()
    default = engine_store(options)
    candidates = [*stores, *([default] if default.root not in {s.root for s in stores} else [])]
    policy = Policy(options.strict, options.max_engines_per_partition,
                    inductor_patches=tuple(options.inductor_patches.items()))
    t0 = time.perf_counter()
    for store in candidates:
        runtime = load_runtime(key, store, None, policy, name=f"partition {key[:12]}")
        if runtime is not None:
            logger.info("hybrid_trt: %s loaded from %s in %.3f s", runtime.name, store.root,
                        time.perf_counter() - t0)
            return runtime
    where = ", ".join(str(s.root) for s in candidates if s.root is not None) or "(caching is off)"
    raise RuntimeError(
        f"hybrid_trt: the compiled graph calls delegated partition {key[:16]}..., which is neither in this "
        f"process nor in the engine cache ({where}). The cache entry was evicted or deleted after Inductor "
        "cached the compiled graph: call torch._dynamo.reset() and compile again, or clear Inductor's cache "
        "(TORCHINDUCTOR_CACHE_DIR) together with hybrid_trt's (cache_dir).")


# ---------------------------------------------------------------------------------------------- compile time


def prepare_runtime(*, name: str, module: fx.GraphModule, delegate: str, delegate_options: dict,
                    device: torch.device, input_metas: Sequence[torch.Tensor], n_sizes: int, symbolic: bool,
                    policy: Policy, store: EngineStore, report: PartitionReport,
                    loaded: Optional[dict] = None) -> "PartitionRuntime":
    """The runtime of one delegated partition, its static engine loaded from ``store`` or built (and stored).

    Lowers the partition to compute its key (a symbolic partition at its size hints); ``loaded``: runtimes this
    compile already loaded by key (from the graph manifest), used instead of loading them again. Raises
    DelegateBuildError when the partition cannot be lowered or built."""
    try:
        shapes, sizes = hint_shapes(input_metas, n_sizes, module)
    except UnhintedSize as e:
        raise DelegateBuildError(str(e)) from e
    dtypes = [m.dtype for m in input_metas]
    env = environment(delegate, device)
    t0 = time.perf_counter()
    target = get_delegate(delegate).lowering_target(device, delegate_options)
    with unset_fake_temporarily():  # compile-time builds run under Dynamo's fake mode; lowering needs real weights
        model, out_metas = _lower(module, shapes, dtypes, sizes, target)
    lower_s = time.perf_counter() - t0
    specs = [input_spec(m) for m in input_metas]
    key = engine_key(model=model, input_specs=specs, delegate=delegate, delegate_options=delegate_options,
                     environment=env)
    if symbolic:
        key = _digest("symbolic", key, n_sizes)
    report.key = key
    if loaded and key in loaded:
        runtime = loaded[key]
        report.engines.extend(runtime.report.engines)
        runtime.report, runtime.policy, runtime.name = report, policy, name
        runtime.set_module(module)
        return runtime
    runtime = PartitionRuntime(key, name, delegate, delegate_options, device, policy, report, symbolic, store,
                               module=module)
    if symbolic:
        with unset_fake_temporarily():
            runtime.store_recipe(env)
            if policy.ranges:
                runtime.prepare_range(input_metas, n_sizes, env)
    else:
        signature = signature_text(shapes, ())
        meta = {"kind": "static", "device": str(device), "signature": signature, "input_specs": specs,
                "summary": summary_meta(report)}
        with unset_fake_temporarily():
            runtime.get_or_build_static(model, out_metas, env, meta, signature, lower_s)
    REGISTRY.register(runtime)
    return runtime


def load_runtime(key: str, store: EngineStore, device: Optional[torch.device], policy: Policy, *, name: str,
                 report: Optional[PartitionReport] = None) -> Optional["PartitionRuntime"]:
    """A runtime rebuilt from its store entry (None when absent, or not loadable here). ``device`` None: the
    device it was compiled for."""
    t0 = time.perf_counter()
    # A warm start reads what it uses (lazy: each file verified on first use); a package load (deploy) promises
    # that every file of the package was checked, so it verifies them all now.
    entry = store.get(key, lazy=not policy.deploy)
    if entry is None:
        return None
    meta = entry.meta
    # A package ships no recipe (deploy mode never falls back or builds): export/api.py drops it.
    if meta.get("kind") not in ("static", "symbolic") or (RECIPE not in entry.files and not policy.deploy):
        return None
    device = torch.device(meta["device"]) if device is None else device
    env = environment(meta["delegate"], device)
    if meta.get("environment") != env:
        logger.info("hybrid_trt: engine cache entry %s was written under another environment; not loaded", key)
        return None
    report = report or PartitionReport(index=-1, delegate=meta["delegate"], **meta.get("summary", {}))
    report.key = key
    files = entry.files
    if meta["kind"] == "symbolic" and not policy.deploy:
        # Each new shape builds its engine (or its Inductor fallback) from the recipe: read and checked now, while
        # a damaged one can still be replaced by compiling the traced graph again (the store removed the entry
        # and warned), not at a call, where nothing could run that shape.
        try:
            files[RECIPE]
        except CorruptEntry as e:
            logger.debug("hybrid_trt: %s: %s; rebuilt", name, e)
            return None
    runtime = PartitionRuntime(key, name, meta["delegate"], meta["delegate_options"], device, policy, report,
                               meta["kind"] == "symbolic", store, recipe=lambda: files[RECIPE])
    if meta["kind"] == "static":
        try:
            with unset_fake_temporarily():
                runtime.load_static(entry, t0=t0)
            if hasattr(files, "close"):
                files.close(keep=(RECIPE,))  # the engine is loaded; only a fallback may still need the recipe
        except CorruptEntry as e:  # the store removed the entry and warned
            logger.debug("hybrid_trt: %s: %s; rebuilt", name, e)
            return None
        except Exception as e:  # noqa: BLE001 - a stored engine that does not load is rebuilt, never fatal
            if policy.deploy:  # a package's store is read-only: load() says what to do
                logger.warning("hybrid_trt: %s: stored %s engine does not load (%s)", name, meta["delegate"], e)
            else:  # removed (one warning), so that the rebuild replaces it
                store.discard(entry, f"{meta['delegate']}: {type(e).__name__}: {e}")
            return None
    REGISTRY.register(runtime)
    return runtime


# ---------------------------------------------------------------------------------------------- runtime


class _FakeInterpreter(fx.Interpreter):
    """Runs the partition under the active fake mode; constants become fake tensors of the same layout."""

    def get_attr(self, target, args, kwargs):
        real = super().get_attr(target, args, kwargs)
        return torch.empty_strided(real.shape, real.stride(), dtype=real.dtype, device=real.device)


class PartitionRuntime:
    deploy_signatures: tuple = ()  # deploy mode: the input-shape signatures the package holds engines for
    def __init__(self, key: str, name: str, delegate: str, delegate_options: dict, device: torch.device,
                 policy: Policy, report: PartitionReport, symbolic: bool, store: EngineStore, *,
                 module: Optional[fx.GraphModule] = None, recipe: Optional[Callable[[], bytes]] = None):
        self.key = key
        self.name = name
        self.delegate = get_delegate(delegate)
        self.delegate_options = dict(delegate_options)
        self.device = device
        self.lowering_target = self.delegate.lowering_target(device, self.delegate_options)
        self.policy = policy
        self.report = report
        self.symbolic = symbolic
        self.store = store
        self._module = module
        self._recipe = recipe  # the stored recipe's bytes, read and checksummed on first call
        self._engines: dict = {}  # signature -> callable(inputs, sizes) (engines, or the Inductor fallback)
        self._held = 0  # engines this runtime built or loaded from the store: the engine bound counts both
        self._past_bound = False  # the engine bound was reached: shapes without an engine run through Inductor
        self._fallback: Optional[Callable] = None
        self._static_outputs: Optional[list] = None
        self._static_engine: Optional[Callable] = None
        self._static_ran = False  # the static engine has run once (its failures since are not first-call ones)
        self.capture_verdicts: dict = {}  # input signature -> cudagraphs.ProbeResult (capture_probe.py)
        self.ranged: list = []  # (RangePlan, store key, engine): engines that each serve a range of shapes
        self._loaded_shapes: dict = {}  # deploy mode: signature text -> engine, every listed shape's, from load
        self.range_note: Optional[str] = None  # why the partition has engines per shape despite declared ranges

    @property
    def module(self) -> fx.GraphModule:
        """The partition's FX module (the recipe): given at compile time, else read from the entry on first use
        (only a fallback or a new shape needs it)."""
        if self._module is None:
            try:
                data = self._recipe()
            except KeyError:
                raise BuildInDeployMode(f"{self.name}: the package holds no recipe (the partition's FX module): "
                                        "a loaded package never lowers, builds or falls back") from None
            except CorruptEntry as e:
                raise RuntimeError(
                    f"hybrid_trt: {self.name}: the stored recipe (the partition's FX module) is damaged ({e}); the "
                    "entry was removed from the engine cache. Call torch._dynamo.reset() and compile again.") from e
            self._module = torch.load(io.BytesIO(data), weights_only=False, map_location=self.device)
            self._recipe = None
        return self._module

    def set_module(self, module: fx.GraphModule) -> None:
        """The recipe, in memory already (saves reading it from the entry)."""
        self._module, self._recipe = module, None

    def recipe_bytes(self) -> bytes:
        if self._recipe is not None:
            return self._recipe()
        buffer = io.BytesIO()
        torch.save(self.module, buffer)
        return buffer.getvalue()

    # -- compile time --------------------------------------------------------------------------------------------
    def _entry_meta(self, env: dict, extra: dict) -> dict:
        return {"delegate": self.delegate.name, "delegate_options": self.delegate_options, "environment": env,
                **extra}

    def get_or_build_static(self, model: onnx.ModelProto, out_metas: list, env: dict, meta: dict,
                            signature: str, lower_s: float) -> None:
        """The static engine: loaded from the store, else built (and stored). Processes compiling the same
        partition at once build it once (the store's per-key lock)."""
        t0 = time.perf_counter()
        if self.store.root is None:
            engine = self._build_engine(model, out_metas, signature)
        else:
            built: list = []

            def build():
                built.append(self._build_engine(model, out_metas, signature))
                files = {RECIPE: self.recipe_bytes(), **self._engine_files(built[0])}
                return files, self._entry_meta(env, {**meta, "outputs": metas_json(out_metas)})

            entry, loaded = self.store.get_or_build(self.key, build, expect_environment=env)
            if loaded:
                try:
                    self.load_static(entry, lower_s, t0)
                    return
                except Exception as e:  # noqa: BLE001 - a stored engine that does not load is rebuilt
                    # Removed (one warning) and replaced by this build, or every process would rebuild it.
                    self.store.discard(entry, f"{self.delegate.name}: {type(e).__name__}: {e}")
                    files, stored_meta = build()
                    self.store.put(self.key, files, stored_meta)
            engine = built[-1]
        self._set_static(engine, out_metas)
        self._record(signature, "built", lower_s + time.perf_counter() - t0, lower_s)

    def load_static(self, entry: Entry, lower_s: float = 0.0, t0: Optional[float] = None) -> None:
        t0 = time.perf_counter() if t0 is None else t0
        out_metas = metas_from_json(entry.meta["outputs"])
        engine = self._load_engine(entry, out_metas)
        self._set_static(engine, out_metas)
        self._record(entry.meta["signature"], "loaded", lower_s + time.perf_counter() - t0, lower_s)

    def store_recipe(self, env: dict) -> None:
        """A symbolic partition's recipe, so a fresh process can build or load its per-shape engines."""
        t0 = time.perf_counter()
        if self.store.root is not None and self.store.get(self.key) is None:
            meta = self._entry_meta(env, {"kind": "symbolic", "device": str(self.device),
                                          "summary": summary_meta(self.report)})
            self.store.put(self.key, {RECIPE: self.recipe_bytes()}, meta)
            logger.debug("hybrid_trt: %s recipe stored in %.3f s", self.name, time.perf_counter() - t0)

    def prepare_range(self, input_metas, n_sizes: int, env: dict) -> None:
        """One engine for the declared range of this symbolic partition, if lowering it at several shapes of the
        range gives one graph (ranges.py); else ``range_note`` says why, and shapes get engines of their own."""
        t0 = time.perf_counter()
        try:
            placeholders = [n for n in self.module.graph.nodes if n.op == "placeholder"]
            size_exprs = [size_expr(n.meta["val"]) for n in placeholders[len(input_metas):len(input_metas) + n_sizes]]
            out_node = next(n for n in self.module.graph.nodes if n.op == "output")
            out_dims = [[size_expr(s) for s in a.meta["val"].shape] for a in out_node.args[0]]
            plan = _ranges.plan_range([[size_expr(s) for s in m.shape] for m in input_metas], out_dims, size_exprs,
                                      {name: (lo, opt, hi) for name, lo, opt, hi in self.policy.ranges})
            dtypes = [m.dtype for m in input_metas]
            models, out_metas = [], None
            for point in [plan.point("opt")] + _ranges.sample_points(plan):
                sizes = tuple(_ranges.evaluate(e, point) for e in size_exprs)
                try:
                    model, metas = _lower(self.module, plan.shapes_at(point), dtypes, sizes, self.lowering_target)
                except DelegateBuildError as e:
                    raise _ranges.NotRanged(f"lowering at input shapes {plan.shapes_at(point)} failed: {e}") from e
                models.append(_ranges.generic_model(model, plan))
                out_metas = out_metas or metas  # at opt
            for other in models[1:]:
                diff = _ranges.first_difference(models[0], other)
                if diff:
                    raise _ranges.NotRanged(diff)
        except _ranges.NotRanged as e:
            self.range_note = str(e)
            logger.info("hybrid_trt: %s: engines per shape, not one for the range: %s", self.name, e)
            return
        lower_s = time.perf_counter() - t0
        text = "range " + plan.text()
        # Keyed by the range model's own content, not by the partition's key: that one is lowered at the sizes the
        # compile first traced (a LiDAR frame's point count, different at every start), this one at the plan's.
        content = engine_key(model=models[0], input_specs=[(shape, dtype, None, self.device) for shape, dtype
                                                           in zip(plan.inputs, dtypes)],
                             delegate=self.delegate.name, delegate_options=self.delegate_options, environment=env)
        key = _digest("range", content, plan.to_json(), [str(d) for d in dtypes])
        try:
            if self.store.root is None:
                engine = self._build_engine(models[0], out_metas, text)
                source = "built"
            else:
                built: list = []

                def build():
                    built.append(self._build_engine(models[0], out_metas, text))
                    meta = {"kind": "range", "partition": self.key, "signature": text, "range": plan.to_json(),
                            "device": str(self.device), "outputs": metas_json(out_metas)}
                    return self._engine_files(built[0]), self._entry_meta(env, meta)

                entry, loaded = self.store.get_or_build(key, build, expect_environment=env)
                engine = self._load_engine(entry, out_metas) if loaded else built[0]
                source = "loaded" if loaded else "built"
        except BuildInDeployMode:
            raise
        except Exception as e:  # noqa: BLE001 - the shapes still get engines of their own
            self.range_note = f"the engine for the range failed to build: {e}"
            logger.warning("hybrid_trt: %s: %s; engines per shape instead", self.name, self.range_note)
            return
        self.ranged.append((plan, key, engine))
        self._record(text, source, time.perf_counter() - t0, lower_s)

    def load_range(self, key: str) -> None:
        """Deploy mode: the stored engine for a range (its store ``key``, from the package's manifest)."""
        t0 = time.perf_counter()
        entry = self.store.get(key, lazy=not self.policy.deploy)
        if entry is None or entry.meta.get("kind") != "range" or entry.meta.get("partition") != self.key:
            raise CorruptEntry(f"{self.name}: no engine entry {key} for a range of this partition")
        plan = _ranges.RangePlan.from_json(entry.meta["range"])
        engine = self._load_engine(entry, metas_from_json(entry.meta["outputs"]))
        self.ranged.append((plan, key, engine))
        self._record(entry.meta["signature"], "loaded", time.perf_counter() - t0, 0.0)

    def load_shape(self, key: str) -> None:
        """Deploy mode: the stored engine for one listed input-shape signature, loaded now (at ``load``), not at
        its first call: the package's files may be gone by then (a directory moved or replaced, an extraction
        cleaned up)."""
        t0 = time.perf_counter()
        entry = self.store.get(key, lazy=False)
        if entry is None or entry.meta.get("kind") != "shape" or entry.meta.get("partition") != self.key:
            raise CorruptEntry(f"{self.name}: no engine entry {key} for an input shape of this partition")
        signature = entry.meta["signature"]
        self._loaded_shapes[signature] = self._load_engine(entry, metas_from_json(entry.meta["outputs"]))
        self._record(signature, "loaded", time.perf_counter() - t0, 0.0)

    def _set_static(self, engine: Engine, out_metas) -> None:
        self._static_outputs = [(tuple(int(s) for s in o.shape), o.dtype) for o in out_metas]
        self._static_engine = self._first_call_guard(engine)

    def _record(self, signature: str, source: str, seconds: float, lower_s: float) -> None:
        self.report.engines.append(EngineRecord(signature, source, seconds, lower_s))
        logger.info("hybrid_trt: %s %s engine %s for [%s] in %.3f s (lowering %.3f s)", self.name,
                    self.delegate.name, source, signature, seconds, lower_s)

    def _build_engine(self, model: onnx.ModelProto, out_metas, signature: str) -> Engine:
        if self.policy.deploy:
            raise BuildInDeployMode(f"{self.name}: deploy mode: refusing to build a {self.delegate.name} engine "
                                    f"for [{signature}]")
        what = f"hybrid_trt: {self.name}: building the {self.delegate.name} engine for [{signature}]"
        logger.info("%s ...", what)
        try:
            keep_serialized = self.store.root is not None
            shared = self.delegate.build_cache_name(self.device, self.delegate_options) if keep_serialized else None
            extra = {"build_cache": self.store.read_shared(shared)} if shared else {}
            with notice_if_slow(what):
                engine = _outside_graph_pools(self.device, lambda: self.delegate.build(
                    model, out_metas, self.device, self.delegate_options, keep_serialized=keep_serialized, **extra))
        except Exception as e:
            raise DelegateBuildError(f"{self.delegate.name} build failed: {e}") from e
        if shared:
            if engine.build_cache:
                self.store.write_shared(shared, engine.build_cache)
            engine.build_cache = None  # kept by the store; the engine lives on without the bytes
        self._held += 1
        return engine

    def _engine_files(self, engine: Engine) -> dict:
        return {_ENGINE_PREFIX + name: data for name, data in self.delegate.serialize(engine).items()}

    def _load_engine(self, entry: Entry, out_metas) -> Engine:
        return _outside_graph_pools(self.device, lambda: self.delegate.load(
            _EngineFiles(entry.files), out_metas, self.device, self.delegate_options))

    # -- fake (shape propagation during tracing and Inductor lowering) ----------------------------------------
    def fake(self, inputs, sizes):
        if self._static_outputs is not None:
            device = inputs[0].device if inputs else self.device
            return [torch.empty(shape, dtype=dtype, device=device) for shape, dtype in self._static_outputs]
        outs = _FakeInterpreter(self.module).run(*inputs, *sizes)
        # Engines return contiguous tensors: say so, whatever strides the ATen ops would have produced.
        return [o.new_empty(o.shape) for o in outs]

    # -- run time (hot path) -----------------------------------------------------------------------------------
    def run(self, inputs, sizes):
        # Static partitions have exactly one signature (Dynamo guards on it): no lookup on the hot path.
        engine = self._static_engine
        if engine is not None:
            try:
                return engine(inputs)
            except Exception as e:  # noqa: BLE001 - a try costs nothing until it raises (_engine_failed)
                return self._engine_failed(e, None, inputs, sizes)
        signature = (tuple(t.shape for t in inputs), tuple(sizes))
        runner = self._engines.get(signature)
        if runner is None:
            if self._past_bound:  # no store lookup and no entry per shape: sizes may differ at every call
                return self._fallback(inputs, sizes)
            return self._first_call(signature, inputs, sizes)
        try:
            return runner(inputs, sizes)
        except Exception as e:  # noqa: BLE001
            return self._engine_failed(e, signature, inputs, sizes)

    # -- slow paths ----------------------------------------------------------------------------------------------
    def _first_call(self, signature, inputs, sizes):
        """First sight of a shape of a symbolic partition: load its engine from the store, or build it."""
        shapes = [tuple(t.shape) for t in inputs]
        dtypes = [t.dtype for t in inputs]
        # An engine that serves a range of shapes is remembered for each signature it met, up to _MEMO_LIMIT of
        # them: a size that changes at every call (a point count) must not grow the dict with every call.
        memo = len(self._engines) < _MEMO_LIMIT
        for plan, _key, engine in self.ranged:
            if plan.covers(shapes):
                if memo:
                    self._engines[signature] = lambda ins, _sizes, engine=engine: engine(ins)
                return self._checked_call(engine, signature, inputs, sizes)
        text = signature_text(shapes, sizes)
        loaded = self._loaded_shapes.get(text)
        if loaded is not None:
            self._engines[signature] = lambda ins, _sizes, engine=loaded: engine(ins)
            return self._checked_call(loaded, signature, inputs, sizes)
        if not self.policy.deploy and self._held >= self.policy.max_engines:
            # Checked before the store: a loaded engine is held in memory like a built one. Were loaded engines
            # free, each process would serve every shape earlier ones stored, and build as many more.
            return self._past_the_bound(text, inputs, sizes)
        key = _digest("shape", self.key, text, [str(d) for d in dtypes])
        t0 = time.perf_counter()
        entry = None
        try:
            entry = self.store.get(key, lazy=True)
            if entry is not None:
                engine = self._load_engine(entry, metas_from_json(entry.meta["outputs"]))
                self._held += 1
                outs, rejected = self._first_run(engine, inputs, sizes)
                self._record(text, "loaded", time.perf_counter() - t0, 0.0)
                self._engines[signature] = lambda ins, _sizes, engine=engine: engine(ins)
                if rejected is not None:  # the caller's error: the loaded engine stays
                    raise _CallersError(rejected)
                return outs
        except _CallersError as e:
            raise e.eager from None
        except CorruptEntry as e:  # the store removed the entry and warned
            logger.debug("hybrid_trt: %s: stored engine for [%s]: %s; building it again", self.name, text, e)
        except Exception as e:  # noqa: BLE001 - an unusable stored engine is rebuilt, and replaced below
            if self.policy.deploy:
                logger.warning("hybrid_trt: %s: stored engine for [%s] unusable (%s)", self.name, text, e)
            elif entry is not None:
                self.store.discard(entry, f"[{text}] {type(e).__name__}: {e}")
        if self.policy.deploy:
            raise self.not_in_package(text)
        try:
            t1 = time.perf_counter()
            model, out_metas = _lower(self.module, shapes, dtypes, tuple(sizes), self.lowering_target)
            lower_s = time.perf_counter() - t1
            engine = self._build_engine(model, out_metas, text)
            outs, rejected = self._first_run(engine, inputs, sizes)
        except Exception as e:
            if self.policy.strict:
                raise
            self._fall_back(f"shape {text}: {e}")
            return self._route_to_inductor(signature, inputs, sizes)
        self._record(text, "built", time.perf_counter() - t0, lower_s)
        if self.store.root is not None:
            env = environment(self.delegate.name, self.device)
            meta = self._entry_meta(env, {"kind": "shape", "partition": self.key, "signature": text,
                                          "device": str(self.device), "outputs": metas_json(out_metas)})
            try:
                self.store.put(key, self._engine_files(engine), meta)
            except Exception as e:  # noqa: BLE001 - storing is best effort; the engine runs either way
                logger.warning("hybrid_trt: %s: engine for [%s] not stored: %s", self.name, text, e)
        self._engines[signature] = lambda ins, _sizes, engine=engine: engine(ins)
        if rejected is not None:  # the caller's error: the engine is kept, and stored, for the next call
            raise rejected from None
        return outs

    def _first_run(self, engine: Engine, inputs, sizes) -> tuple:
        """(outputs, None), or (None, eager's error) where the engine and eager PyTorch both reject the inputs (an
        index out of range): the engine is not at fault. Any other failure is raised (the engine is)."""
        try:
            return engine(inputs), None
        except Exception as e:
            rejected = self._eager_rejection(inputs, sizes)
            if rejected is not None:
                return None, rejected
            if self.policy.strict or self.policy.deploy:
                raise _explained(e, self.name, self.delegate.name, self.policy.deploy) from e
            raise

    def _checked_call(self, engine: Engine, signature, inputs, sizes):
        try:
            return engine(inputs)
        except Exception as e:  # noqa: BLE001
            return self._engine_failed(e, signature, inputs, sizes)

    def _engine_failed(self, e: Exception, signature, inputs, sizes):
        """An engine raised at a call (``signature`` None: the static engine). Inputs eager PyTorch rejects too (an
        index out of range) are the caller's error: eager's is raised, and the engine stays. Otherwise the engine
        fails where eager runs: that signature (a static partition: the partition) runs through Inductor from now
        on, with one warning; ``strict`` and a loaded package (no fallback) raise, saying what failed."""
        if signature is not None and self._engines.get(signature) is self._fallback:
            raise e  # the Inductor fallback's own error handling ran already
        rejected = self._eager_rejection(inputs, sizes)
        if rejected is not None:
            logger.debug("hybrid_trt: %s: engine call failed (%s); eager PyTorch rejects the inputs too", self.name, e)
            raise rejected from None
        if self.policy.strict or self.policy.deploy:
            raise _explained(e, self.name, self.delegate.name, self.policy.deploy) from e
        what = "first call" if not self._static_ran and signature is None else "a call"
        if signature is not None:
            self._fall_back(f"shape {signature_text(*map(list, signature))}: {what} failed: {e}")
            return self._route_to_inductor(signature, inputs, sizes)
        self.report.status = "fell back to Inductor"  # the partition's only engine is gone
        self._fall_back(f"{what} failed: {e}")
        runner = self._inductor_runner()
        self._static_engine = lambda ins: runner(ins, ())
        return self._static_engine(inputs)

    def _eager_rejection(self, inputs, sizes) -> Optional[Exception]:
        """Eager PyTorch's error for these inputs, or None when it runs them or cannot be asked (a loaded package
        holds no FX module of the partition)."""
        try:
            module = self.module
        except BuildInDeployMode:
            return None
        return _rejected_by_eager(module, inputs, sizes)

    def _route_to_inductor(self, signature, inputs, sizes):
        """This shape signature runs through the partition's Inductor fallback from now on."""
        self.report.shapes_on_inductor += 1
        self._engines[signature] = self._inductor_runner()
        return self._engines[signature](inputs, sizes)

    def _fall_back(self, why: str) -> None:
        self.report.events.append(f"fell back to Inductor: {why}")
        logger.warning("hybrid_trt: %s (%s) falls back to Inductor: %s", self.name, self.delegate.name, why)

    def not_in_package(self, signature: str) -> EngineNotInPackage:
        ranges = [plan.text(name_ties=True) for plan, _key, _engine in self.ranged]
        return EngineNotInPackage(
            f"{self.name} ({self.delegate.name}) has no engine for input shapes [{signature}]; the package has "
            + " and ".join([f"engines for {list(self.deploy_signatures)}"] * bool(self.deploy_signatures or not ranges)
                           + [f"an engine for each input-shape range {ranges}"] * bool(ranges))
            + (" (dimensions named by one symbol, e.g. s0:[1..8], are one size: they must be equal)"
               if any(plan.ties() for plan, _key, _engine in self.ranged) else "")
            + ". Export the model again listing this shape or a range that holds it "
            "(hybrid_trt.export(..., shapes=[...], dynamic_shapes=...) or hybrid-trt export --shape ... --dynamic ...)")

    def _past_the_bound(self, text: str, inputs, sizes):
        """The first shape past ``max_engines_per_partition``: said once, then this and every later shape without
        an engine runs through the Inductor fallback (``run``). Once, not per shape: a partition whose sizes follow
        the data (a detector's per-box mask resize) meets a new shape at nearly every call, and a warning, an event
        and an entry each would grow without end."""
        self.report.events.append(
            f"engine bound {self.policy.max_engines} reached: shape {text} and every later new shape run "
            "through Inductor")
        # A size that varies over a known range (a point count, a batch) can have one engine for all of it.
        ranged = ("" if self.ranged else
                  " For a size that varies over a known range (a LiDAR point count, a batch), mark it dynamic with "
                  "bounds, torch._dynamo.mark_dynamic(x, dim, min=..., max=...): one engine then serves the whole "
                  "range where the partition allows it.")
        logger.warning(
            "hybrid_trt: %s reached max_engines_per_partition=%d at shape %s: its input shapes keep changing "
            "(a batch or image size that varies, or sizes that follow the data, e.g. per detection). This and "
            "every later new shape run through Inductor (the %d engines built or loaded still serve their "
            "shapes). Raise max_engines_per_partition if the shapes recur, or keep these ops with Inductor "
            "(force_inductor_ops=[...]).%s",
            self.name, self.policy.max_engines, text, self.policy.max_engines, ranged)
        self._inductor_runner()
        self._past_bound = True
        return self._fallback(inputs, sizes)

    def _inductor_runner(self):
        if self.policy.deploy:
            raise BuildInDeployMode(f"{self.name}: deploy mode: refusing to compile the Inductor fallback")
        if self._fallback is None:
            # Inductor with our opaque ops decomposed back, as the stitched graph gets them (capture/preserve.py), on
            # a GraphModule of its own: Dynamo skips the partition module's own code object by the time this runs
            # (it never reached the backend, and the fallback ran eagerly: tests/test_attention.py), while fresh
            # code from the same graph is traced.
            fresh = fx.GraphModule(self.module, copy.deepcopy(self.module.graph))
            compiled = torch.compile(fresh, dynamic=self.symbolic, backend=functools.partial(
                _inductor_with_our_decompositions, config_patches=dict(self.policy.inductor_patches)))
            module, name, strict = self.module, self.name, self.policy.strict

            def run(inputs, sizes):
                nonlocal compiled
                try:
                    out = compiled(*inputs, *sizes)
                except Exception as e:  # noqa: BLE001 - torch.compile is lazy: Inductor fails at this first call
                    if strict or compiled is module:
                        raise
                    rejected = _rejected_by_eager(module, inputs, sizes)
                    if rejected is not None:  # the inputs are at fault: Inductor's code stays, for the next call
                        raise rejected from None
                    # The fallback itself must not fail: the partition's FX module runs the same ATen ops eagerly.
                    logger.warning("hybrid_trt: %s: Inductor failed on the fallback, running it eagerly: %s",
                                   name, e)
                    compiled = module
                    out = compiled(*inputs, *sizes)
                return [_owned(o, inputs) for o in out]
            self._fallback = run
        return self._fallback

    def _first_call_guard(self, engine: Engine) -> Callable:
        """The static engine, noting its first successful call (a failure goes to ``_engine_failed`` from ``run``,
        which tells a first call's failure from a later one's)."""
        ref = weakref.ref(self)  # no cycle: the runtime is released with the compiled graph that holds it

        def first(inputs):
            outs = engine(inputs)
            me = ref()
            me._static_engine, me._static_ran = engine, True
            return outs
        return first


# ---------------------------------------------------------------------------------------------- helpers


class _CallersError(Exception):
    """Carries eager's error for inputs both the engine and eager reject out of the stored-engine ``try``, which
    would take any other exception for an unusable entry."""

    def __init__(self, eager: Exception):
        super().__init__(str(eager))
        self.eager = eager


# What ONNX Runtime's index checks say (Gather, GatherElements, GatherND, the scatters) when an index is out of range.
_ORT_INDEX_ERRORS = ("out of data bounds", "Out of range value in index", "invalid indice", "index out of bound")


def _explained(e: Exception, name: str, delegate: str, deploy: bool) -> Exception:
    """The engine's failure as the caller should read it: an index out of range as eager's IndexError (naming the
    negative index that ``lowerings/ops/indexing.py`` moves past every end), anything else said to be the engine's."""
    text = str(e)
    if any(marker in text for marker in _ORT_INDEX_ERRORS):
        return IndexError(
            f"index out of range in self: an index the model was given is outside the tensor it indexes "
            f"({name}, {delegate}: {text.split(chr(10))[0].strip()}). Negative indices are out of range here as in "
            f"eager PyTorch, and appear in that text as {2 ** 63 - 1}.")
    return EngineCallFailed(f"{name} ({delegate}): its engine failed: {text.split(chr(10) + chr(10) + 'At:')[0]}"
                            + (". A loaded package compiles no fallback; the inputs may be ones the model never "
                               "takes (compare with eager PyTorch)" if deploy else ""))


def _rejected_by_eager(module, inputs, sizes) -> Optional[Exception]:
    """The error eager PyTorch raises for these inputs (an out-of-range index, say), or None when it runs them.
    A delegate's or Inductor's failure on inputs eager rejects too is the caller's error, raised as eager raises
    it: it must not move the partition off its engine (or its Inductor code) for every later call."""
    try:
        with torch.no_grad():
            module(*inputs, *sizes)
    except Exception as e:  # noqa: BLE001 - whatever eager raises is the answer
        return e
    return None


def _owned(out: torch.Tensor, inputs) -> torch.Tensor:
    """A fallback output as the delegate op promises it (its fake says so): contiguous, in storage of its own at
    offset 0. Inductor relies on it (it asserts 16-byte alignment of custom-op outputs; under CUDA graphs it
    tracks outputs as fresh pool allocations), but a module run by Inductor or eagerly may return a slice of a
    larger buffer or a view of an input."""
    if out.is_contiguous() and out.storage_offset() == 0 and out._base is None \
            and all(out.untyped_storage().data_ptr() != t.untyped_storage().data_ptr() for t in inputs):
        return out
    return out.clone(memory_format=torch.contiguous_format)


def _outside_graph_pools(device: torch.device, make: Callable[[], Engine]) -> Engine:
    """``make()`` (an engine build or load) on a helper thread when ``device`` is a CUDA device.

    A symbolic partition builds or loads an engine at the first call of a new shape. Under CUDA graphs
    (``mode="reduce-overhead"``) that first call happens while Inductor's CUDA-graph trees warm the new shape up,
    and during warm-up every allocation *of the calling thread* comes from the graph's private memory pool. What
    an engine keeps for its lifetime (e.g. ONNX Runtime's stand-in buffer for empty tensors) would then be a live
    pool allocation the trees do not own, which they refuse ("tensor(s) in the cudagraph pool not tracked as
    outputs"). Another thread allocates from the ordinary caching allocator. Builds are rare (once per shape),
    so a thread per build costs nothing that matters."""
    if device.type != "cuda":
        return make()
    result: dict = {}

    def target():
        try:
            with torch.cuda.device(device):
                result["engine"] = make()
        except BaseException as e:  # noqa: BLE001 - re-raised on the calling thread
            result["error"] = e

    worker = threading.Thread(target=target, name="hybrid_trt-engine-build", daemon=True)
    worker.start()
    worker.join()
    if "error" in result:
        raise result["error"]
    return result["engine"]


class _EngineFiles(Mapping):
    """The delegate's files of an entry (``engine.*``, prefix dropped), read only as the delegate asks for them."""

    def __init__(self, files: Mapping[str, bytes]):
        self._files = files

    def __getitem__(self, name: str) -> bytes:
        return self._files[_ENGINE_PREFIX + name]

    def __iter__(self) -> Iterator[str]:
        return (name[len(_ENGINE_PREFIX):] for name in self._files if name.startswith(_ENGINE_PREFIX))

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __contains__(self, name) -> bool:
        return isinstance(name, str) and _ENGINE_PREFIX + name in self._files


def _inductor_with_our_decompositions(gm: fx.GraphModule, example_inputs, config_patches=None):
    from torch._inductor.compile_fx import compile_fx
    from ..capture.preserve import inductor_decompositions
    with quiet(TORCH_CPP_BUILDER):  # it may run at call time (a shape past the engine bound): as backend.py
        return compile_fx(gm, example_inputs, decompositions=inductor_decompositions(),
                          config_patches=config_patches)


def _lower(module, shapes, dtypes, sizes, target: str):
    try:
        return lower_partition(module, shapes, dtypes, sizes, target=target)
    except Exception as e:
        raise DelegateBuildError(f"lowering failed: {e}") from e


def _digest(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, default=str).encode()).hexdigest()


def summary_meta(report: PartitionReport) -> dict:
    """What a store entry keeps of its partition's report, for a process that loads it."""
    return {"op_count": report.op_count, "ops": report.ops, "input_shapes": report.input_shapes,
            "output_shapes": report.output_shapes}
