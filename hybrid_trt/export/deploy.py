"""``hybrid_trt.load``: a package opened on the target and run, without building.

``load`` opens a package, checks every file against its checksum, loads each partition's engines from the
package's store with the runtime in deploy mode (any build, lowering or Inductor fallback raises) and loads the
AOTInductor package. Nothing is traced, lowered or built. ``DeployedModel`` is the callable it returns: each call's
inputs are checked against what the package was exported for (dtype, rank, device, sizes and their ranges, the
engines of a listed shape) before the compiled code runs.
"""
from __future__ import annotations

import functools
import pathlib
import threading
import time
from typing import Callable, Optional

import torch
import torch.utils._pytree as pytree

from .. import cudagraphs
from ..engines.op import run_surfacing_failures
from ..log import logger
from ..plugins import registry as plugin_registry
from . import custom_ops
from . import package as pkg
from . import structure
from .engine_check import EngineCheck
from .input_dims import DimCheck, shapes_text
from .package import PackageError

class DeployedModel:
    """A loaded package: call it like the model (its positional inputs, nested as exported, or the tensors
    alone). Holds its partitions' runtimes (the key registry's references are weak) and the AOTInductor model."""

    def __init__(self, package: pkg.Package, aoti, runtimes: list, device: torch.device, cuda_graphs: bool = False):
        self.package = package
        self.manifest = package.manifest
        self.device = device
        self._aoti = aoti
        self._run = functools.partial(run_surfacing_failures, _flat_call(aoti))
        # None unless asked for; then what load(cuda_graphs=True) captures, and why not (report.CudaGraphRecord)
        self.cuda_graphs = None
        if cuda_graphs:
            self._run, self.cuda_graphs = _replayed(self._run, self.manifest, str(package.source))
        self._runtimes = runtimes
        io = self.manifest["io"]
        self._out_spec = pytree.treespec_loads(io["out_spec"])
        self._out_restore = structure.restorer(io.get("out_namedtuples"))
        in_spec = io.get("in_spec")  # nested inputs: a call is flattened by their structure
        self._in_spec = pytree.treespec_loads(in_spec) if in_spec is not None else None
        self._in_restore = structure.restorer(io.get("in_namedtuples"))
        self._n_inputs = len(self.manifest["inputs"])
        self._static = all(not i["dynamic_dims"] for i in self.manifest["inputs"])
        self._listed = {tuple(tuple(s) for s in case) for case in self.manifest["shapes"]}
        # A dynamic package's sizes are checked against the exported ranges before the call (AOTInductor's runtime
        # does not check them); packages written before the manifest had "dims" are called unchecked, as then.
        self._dims = DimCheck(self.manifest["inputs"])
        # Partitions with one engine per exported shape: a call at an unlisted size inside the ranges is checked
        # against their engines before AOTInductor runs (engine_check.py).
        self._engines = EngineCheck(self.manifest["inputs"], self.manifest["partitions"])
        # What each input must be (name, dtype, rank, device type), checked at every call: the compiled code reads
        # an input's bytes as the dtype it was exported for, so any other dtype would give wrong numbers, not an
        # error.
        self._expected = [(i["name"], getattr(torch, i["dtype"]), len(self.manifest["shapes"][0][k]),
                           self.device.type) for k, i in enumerate(self.manifest["inputs"])]
        # One call at a time: AOTInductor's runner holds its own lock while it calls back into Python for the
        # engines (which needs the GIL), so a second thread waiting for that lock with the GIL held deadlocked
        # both. This lock is waited for without the GIL. (The runner ran one call at a time anyway.)
        self._call_lock = threading.Lock()

    def __call__(self, *inputs, **named):
        if self._in_spec is not None and not named and not (
                len(inputs) == self._n_inputs and all(isinstance(t, torch.Tensor) for t in inputs)):
            inputs = self._flattened(inputs)  # called as the model is (else with the tensors, by place or name)
        if named:  # by the names the manifest, and every message, gives the inputs
            inputs = self._by_name(inputs, named)
        if len(inputs) != self._n_inputs:
            raise TypeError(f"the package takes {self._n_inputs} input(s) "
                            f"({', '.join(i['name'] for i in self.manifest['inputs'])}), got {len(inputs)}")
        for (name, dtype, rank, device_type), t in zip(self._expected, inputs):
            if not (isinstance(t, torch.Tensor) and t.dtype == dtype and t.dim() == rank
                    and t.device.type == device_type):
                raise self._wrong_input(name, dtype, rank, t)
        if self._static:
            if tuple(tuple(t.shape) for t in inputs) not in self._listed:
                raise self._missing_shape(inputs)
        elif self._dims.active:
            problem = self._dims.problem(inputs)
            # The shapes are looked up only where a check has something to say (the common call builds nothing).
            if problem is not None or self._engines.active:
                shapes = tuple(tuple(t.shape) for t in inputs)
                if shapes not in self._listed:  # a listed shape has every engine it needs (export checked)
                    if problem is not None:
                        raise self._outside_ranges(inputs, problem)
                    missing = self._engines.missing(shapes, inputs)
                    if missing is not None:
                        raise self._no_engine(*missing)
        # AOTInductor's code reads each input at the strides it was compiled for (contiguous) and does not check
        # them: a channels-last, transposed or expanded input gave wrong numbers.
        inputs = [t.contiguous() for t in inputs]  # (returns t itself when it is contiguous)
        try:
            with self._call_lock:
                flat = self._run(*inputs)
        except RuntimeError as e:
            deploy = _deploy_error(e)
            if deploy is not None:
                raise deploy from None
            raise
        return structure.unflatten(list(flat), self._out_spec, self._out_restore)

    def as_model_inputs(self, tensors) -> tuple:
        """The package's input tensors (in manifest order) as the model's positional arguments: nested as they
        were exported, or as they are."""
        return tuple(tensors) if self._in_spec is None else structure.unflatten(list(tensors), self._in_spec,
                                                                                 self._in_restore)

    def _flattened(self, inputs: tuple) -> tuple:
        leaves, spec = pytree.tree_flatten(structure.plain(inputs) if self._in_restore is not None else inputs)
        if spec != self._in_spec:  # dicts match by key, as in Python: their order is the exported one
            template = pytree.tree_unflatten([None] * self._in_spec.num_leaves, self._in_spec)
            leaves, spec = pytree.tree_flatten(structure.keys_ordered_like(
                structure.plain(inputs) if self._in_restore is not None else inputs, template))
        if spec != self._in_spec:
            names = [i["name"] for i in self.manifest["inputs"]]
            raise TypeError(f"hybrid_trt package {self.package.source}: the inputs must have the structure they "
                            f"were exported with, {self.as_model_inputs(names)!r} (each name a "
                            f"tensor), got {pytree.tree_unflatten(['*'] * spec.num_leaves, spec)!r}; or pass the "
                            "tensors alone, by place or by name")
        return tuple(leaves)

    def _by_name(self, positional: tuple, named: dict) -> tuple:
        names = [i["name"] for i in self.manifest["inputs"]]
        unknown = sorted(set(named) - set(names))
        twice = sorted(set(named) & set(names[:len(positional)]))
        if unknown or twice:
            raise TypeError(f"the package takes the inputs ({', '.join(names)})"
                            + (f"; no input is named {', '.join(map(repr, unknown))}" if unknown else "")
                            + (f"; {', '.join(map(repr, twice))} given by position and by name" if twice else ""))
        missing = [n for n in names[len(positional):] if n not in named]
        if missing:
            raise TypeError(f"the package takes the inputs ({', '.join(names)}); missing: {', '.join(missing)}")
        return tuple(positional) + tuple(named[n] for n in names[len(positional):])

    def _wrong_input(self, name: str, dtype: torch.dtype, rank: int, given) -> TypeError:
        what = (f"a {given.dtype} tensor of rank {given.dim()} on {given.device}" if isinstance(given, torch.Tensor)
                else f"a value of type {type(given).__name__}")
        return TypeError(f"hybrid_trt package {self.package.source}: input {name!r} must be a {dtype} tensor of "
                         f"rank {rank} on {self.device.type}, got {what}. The package runs the dtypes, ranks and "
                         "device it was exported for: convert the input (e.g. x.to(dtype)), or export again with "
                         "inputs of this kind.")

    def _missing_shape(self, inputs):
        from ..engines.runtime import EngineNotInPackage
        shapes = shapes_text(inputs)
        parts = "; ".join(f"{p['name']} ({p['delegate']}) has engines for {p['signatures']}"
                          for p in self.manifest["partitions"])
        listed = ", ".join(_shapes_text_lists(c) for c in self.manifest["shapes"])
        return EngineNotInPackage(
            f"hybrid_trt package {self.package.source}: no engines for input shapes {shapes}: "
            f"{parts or 'no partitions'}. "
            f"The package was exported for input shapes {listed} (static). Export again listing this shape "
            "(hybrid-trt export --shape ...) or with dynamic dimensions.")

    def _no_engine(self, partition: str, signature: str):
        runtime = next(r for r in self._runtimes if r.name == partition)
        error = runtime.not_in_package(signature)
        return type(error)(f"hybrid_trt package {self.package.source}: {error}")

    def _outside_ranges(self, inputs, problem: str):
        from ..engines.runtime import EngineNotInPackage
        return EngineNotInPackage(
            f"hybrid_trt package {self.package.source}: no engines for input shapes {shapes_text(inputs)}: "
            f"{problem}. The package was exported for {self._dims.spec_text(self.manifest['inputs'])}. Export "
            "again for these sizes: list them (hybrid-trt export --shape ...) or give the dimension a range that "
            "holds them (--dynamic ..., or hybrid_trt.export(..., dynamic_shapes=...)).")

    @property
    def report_text(self) -> str:
        """The export's compile report, as printed (docs/export.md, "Loading")."""
        return self.manifest.get("report_text", "")


def _shapes_text_lists(case) -> str:
    return "[" + ", ".join("x".join(map(str, s)) for s in case) + "]"


def _deploy_error(e: RuntimeError):
    """The runtime's own error when AOTInductor's proxy executor wrapped it (it passes Python errors of custom
    ops on as RuntimeError text)."""
    from ..engines.runtime import BuildInDeployMode, EngineCallFailed, EngineNotInPackage
    text = str(e)
    for cls in (EngineNotInPackage, BuildInDeployMode, EngineCallFailed, IndexError):
        marker = cls.__name__ + ": "
        if marker in text:
            message = text.split(marker, 1)[1].split("\n\nAt:", 1)[0].strip()
            return cls(message)
    return None


def _warn_on_other_versions(package, device) -> None:
    """One warning when the manifest says the package was exported under other versions or another GPU
    architecture: an engine that does not load here fails the load below, but the AOTInductor code (and a
    package with no engine) would load and run without a word, which ``hybrid-trt verify`` refuses."""
    try:
        diffs = pkg.version_differences(package.manifest, device)
    except Exception as e:  # noqa: BLE001 - this machine's versions unreadable: the checks below still run
        logger.debug("hybrid_trt: versions of %s not compared: %s", package.source, e)
        return
    if diffs:
        logger.warning("hybrid_trt package %s was exported under other versions than this machine's (%s); it may "
                       "not run as verified. Export it again here, or install those versions "
                       "(`hybrid-trt verify` fails on this)", package.source, "; ".join(diffs))


def load(path, *, device=None, cuda_graphs: Optional[bool] = None) -> DeployedModel:
    """Open a package and return a callable that runs the model. Nothing is traced, lowered or built: every
    file is checked against the manifest's checksums, engines are loaded from the package (the runtime in
    deploy mode refuses any build), and the AOTInductor package is loaded. Raises PackageError, or ValueError for
    a ``device`` or ``cuda_graphs`` that is not one.

    ``cuda_graphs``: replay each input shape's whole call (AOTInductor's kernels and every engine run) from one
    CUDA graph, captured at its second call (whole_graph.py: outputs are the caller's own tensors). Only where
    export found the graph capturable (the manifest's ``cuda_graphs`` reasons); otherwise the package runs
    uncaptured, with one warning saying why, as does a shape whose capture fails. ``model.cuda_graphs`` says
    which. None (the default): as the package was exported for (``export(options={"cuda_graphs": True})``)
    where it can be captured; running a GPU package placed by measurement the other way is warned about once."""
    from ..engines.runtime import Policy, load_runtime
    from ..engines.store import EngineStore
    t0 = time.perf_counter()
    package = pkg.open_package(path)
    _raise_on_damage(package, engines_checked_by_store=True)
    manifest = package.manifest
    device = _load_device(manifest, device)
    cuda_graphs = _replays(manifest, device, cuda_graphs, package.source)
    _warn_on_other_versions(package, device)
    store = EngineStore(package.engine_root, pkg.NO_EVICTION, read_only=True)
    policy = Policy(strict=True, max_engines=0, deploy=True)
    for name in manifest.get("plugins", []):  # before the engines: a TensorRT engine may hold its plugin nodes
        try:
            plugin_registry.activate(name)
        except Exception as e:  # noqa: BLE001 - unknown name, or its activation fails here
            raise PackageError(f"hybrid_trt package {package.source}: it uses the {name!r} plugin, which does not "
                               f"activate here ({type(e).__name__}: {e}). Install the hybrid_trt version it was "
                               "exported with.", "environment") from e
    runtimes = []
    for part in manifest["partitions"]:
        runtime = load_runtime(part["key"], store, device, policy, name=part["name"])
        if runtime is None:
            _raise_on_damage(package)  # a tampered engine file (the store declined its entry)
            from ..engines.key import environment
            diffs = pkg.environment_differences(manifest, environment)
            raise PackageError(
                f"hybrid_trt package {package.source}: {part['name']} ({part['delegate']}) does not load here"
                + (f": engines were built under another environment ({'; '.join(diffs)})" if diffs else "")
                + ". Export the package again on a machine like this one.", "environment")
        runtime.deploy_signatures = tuple(part["signatures"])
        for engine in part["engines"]:
            if engine["kind"] not in ("range", "shape"):
                continue
            try:
                if engine["kind"] == "range":
                    runtime.load_range(engine["store_key"])
                else:  # the entry's directory is named by its store key
                    runtime.load_shape(pathlib.PurePosixPath(engine["entry"]).name)
            except Exception as e:  # noqa: BLE001 - a damaged or foreign entry: the package does not load
                _raise_on_damage(package)
                what = f"the range {engine['range']}" if engine["kind"] == "range" else f"[{engine['signature']}]"
                raise PackageError(f"hybrid_trt package {package.source}: {part['name']} ({part['delegate']}): "
                                   f"the engine for {what} does not load here ({type(e).__name__}: {e}). Export "
                                   "the package again on a machine like this one.", "environment") from e
        runtimes.append(runtime)
    absent = custom_ops.missing(manifest.get("custom_ops", []))
    if absent:
        raise PackageError(f"hybrid_trt package {package.source}: {pkg.missing_ops_text(absent)}", "environment")
    try:
        aoti = _load_aoti(package.aoti_path, device.index if device.type == "cuda" and device.index is not None
                          else -1, single_threaded=cuda_graphs)
    except Exception as e:
        raise PackageError(f"hybrid_trt package {package.source}: the AOTInductor package does not load "
                           f"({type(e).__name__}: {e}); export it again with this torch version", "environment") \
            from e
    logger.info("hybrid_trt: package %s loaded in %.3f s (%d partition(s))", package.source,
                time.perf_counter() - t0, len(runtimes))
    return DeployedModel(package, aoti, runtimes, device, cuda_graphs)


def _replays(manifest: dict, device: torch.device, asked: Optional[bool], source) -> bool:
    """Whether ``load`` replays the package: ``asked``, or by default what it was exported for where it can be
    captured. Measured placement chose each partition's side by the timing of the calls it was exported for,
    uncaptured or replayed, and the two differ: an H100 package exported for uncaptured calls kept an ONNX Runtime
    partition that under CUDA graphs ran at 1.29x Inductor's replay (benchmarks/results/cudagraphs_h100.md,
    session 31). So a GPU package placed by measurement and run the other way is warned about, once."""
    exported_for = pkg.placed_for_replay(manifest)
    if asked is not None and not isinstance(asked, bool):
        raise ValueError(f"hybrid_trt.load: cuda_graphs is True, False or None (as exported), not {asked!r}")
    replays = pkg.replays_by_default(manifest) if asked is None else asked
    measured = (manifest.get("options") or {}).get("placement") != "delegate" and device.type == "cuda"
    if replays != exported_for and measured:
        logger.warning(
            "hybrid_trt: package %s was placed for %s and runs %s: its partitions were kept on their delegates by "
            "timings of the other kind, so some may run slower than Inductor would. Export it with "
            "options={'cuda_graphs': %s} for this use", source,
            "CUDA-graph replay" if exported_for else "calls without CUDA graphs",
            "with CUDA graphs" if replays else "without CUDA graphs" + (
                "" if asked is not None else " (it cannot be captured: hybrid-trt inspect says why)"), replays)
    return replays


def _replayed(run: Callable, manifest: dict, source: str):
    """``run`` (the package's AOTInductor call) in the whole runner's CUDA graph, and the record of what is
    captured (``DeployedModel.cuda_graphs``); ``run`` itself where export found reasons it cannot be captured."""
    from ..whole_graph import WholeGraph
    reasons = (manifest.get("cuda_graphs") or {}).get("reasons")
    if not isinstance(reasons, list):
        reasons = ["the package does not say whether its graph can be captured (written by an earlier hybrid_trt): "
                   "export it again"]
    record = cudagraphs.whole_runner_record([str(r) for r in reasons])
    if record.reasons:
        logger.warning("hybrid_trt: package %s runs without CUDA graphs: %s", source, "; ".join(record.reasons))
        return run, record
    return WholeGraph(run, [], f"package {source}", record.uncaptured), record


def _flat_call(aoti) -> Callable:
    """The AOTInductor model as a call on the input tensors returning its flat outputs: its loader's
    ``boxed_run`` where its inputs are the positional tensors and its outputs a flat tuple or list (as a package's
    are), ``aoti`` itself otherwise. AOTICompiledModel's own call flattens the arguments and unflattens the
    outputs by their treespecs at every call: 25 of its 69 us on the 2-core CPU (a one-conv package,
    benchmarks/bench_package_call.py)."""
    loader = getattr(aoti, "loader", None)
    run = getattr(loader, "boxed_run", None)
    try:
        in_spec, out_spec = (pytree.treespec_loads(s) for s in loader.get_call_spec())
    except Exception:  # noqa: BLE001 - another torch's loader: its own call
        return aoti
    leaves = list(range(out_spec.num_leaves))
    flat_out = pytree.tree_unflatten(leaves, out_spec) in (tuple(leaves), leaves)
    flat_in = in_spec == pytree.tree_flatten((tuple(range(in_spec.num_leaves)), {}))[1]
    if run is None or not (flat_in and flat_out):
        return aoti
    return lambda *inputs: run(list(inputs))


def _raise_on_damage(package: pkg.Package, engines_checked_by_store: bool = False) -> None:
    for check in pkg.check_files(package, engines_checked_by_store):
        if not check.passed:
            raise PackageError(f"hybrid_trt package {package.source}: {check.detail}", check.name)


def _cxx_runtime_loaded() -> None:
    """The system's C++ runtime loaded into the process, globally, before AOTInductor's compiled library is. On an
    H100 (sessions 32-33) a fresh process segfaulted inside AOTInductor's package loader (torch's own
    ``aoti_load_package`` too) on the example detector's CUDA package; loading ``libstdc++.so.6`` first with
    ``RTLD_GLOBAL``, or importing onnxruntime (whose library links it), avoided it, and nothing else tried did
    (an earlier CUDA context, cuDNN or Inductor imported, libgomp). torch's wheels carry their C++ runtime
    inside; the compiled library links the system's. Where there is none to load, nothing is done."""
    import ctypes
    try:
        ctypes.CDLL("libstdc++.so.6", mode=ctypes.RTLD_GLOBAL)
    except OSError:
        pass


def _load_aoti(path: pathlib.Path, device_index: int, single_threaded: bool = False):
    """``aoti_load_package`` without its diagnostic device check, which compiles C++ test programs to find the
    CPU's vector ISA (tens of seconds on a first start with an empty Inductor cache): nothing is compiled on
    the target, and the manifest's environment (CPU ISA flags included) is what ``verify`` checks.
    ``single_threaded``: without the runner's synchronisation between concurrent calls (it queries CUDA events,
    which a capture forbids: torch's documented setting for CUDA graphs); DeployedModel serialises calls itself."""
    _cxx_runtime_loaded()
    try:
        from torch.export.pt2_archive._package import AOTICompiledModel
        loader = torch._C._aoti.AOTIModelPackageLoader(str(path), "model", single_threaded, 1, device_index)
    except (ImportError, AttributeError, TypeError):  # another torch: its public loader
        return torch._inductor.aoti_load_package(str(path), device_index=device_index,
                                                 run_single_threaded=single_threaded)
    return AOTICompiledModel(loader)


def _load_device(manifest: dict, device) -> torch.device:
    built = torch.device(manifest.get("device", "cpu"))
    if device is None:
        return built
    device = torch.device(device)
    if device.type not in ("cpu", "cuda"):
        raise PackageError(f"hybrid_trt.load: device {device} cannot run a package; give 'cpu' or 'cuda' (the "
                           f"device type it was exported for: {built.type})", "environment")
    if device.type != built.type:
        raise PackageError(f"the package was compiled for {built.type}; AOTInductor code and engines are specific "
                           f"to the device type, so it cannot run on {device}. Export it with inputs on "
                           f"{device.type}.", "environment")
    if device.type == "cpu" and device.index not in (None, 0):
        raise ValueError(f"hybrid_trt.load: there is no CPU device {device}; give 'cpu'")
    return device
