"""``hybrid_trt.export``: a model built ahead of time into one package (``deploy.py`` loads it on the target).

Export is the backend's pipeline with other ends, not a second pipeline:

    torch.export (capture/exported.py)  ->  partition -> lower -> engines (build/store) -> stitch  (backend.py)
                                        ->  AOTInductor (this module)  ->  package (package.py)

The engine store the partitions build into is rooted inside the package being written, so the engines the
stitched graph's ``hybrid_trt::delegate(key, ...)`` calls name are exactly the package's files. Symbolic
partitions (``dynamic_shapes``) build their per-shape engines when the compiled package first runs each listed
input shape; those runs also check the package against eager PyTorch and become the package's reference data.
"""
from __future__ import annotations

import dataclasses
import datetime
import json
import pathlib
import shutil
import time
from typing import Any, Callable, Optional

import torch
import torch.utils._pytree as pytree

from .. import cudagraphs
from ..capture.bounds import finite
from ..engines import ranges as _ranges
from ..inductor_fixes import inductor_defects_avoided
from ..log import SYMBOLIC_SHAPES, TORCH_CPP_BUILDER, ignore_torch_noise, logger, quiet
from ..plugins import registry as plugin_registry
from . import custom_ops
from . import package as pkg
from . import structure
from .errors import ExportError
from .example_inputs import (FlatInputs, check_listed_shapes, derived_dynamic_shapes, example_tensors, shape_cases,
                             to_eval, trace_example)
from .input_dims import describe as describe_dims, shapes_text
from .reference_check import DEFAULT_ATOL, DEFAULT_RTOL, ComparisonError, OutputCheck

ignore_torch_noise()



Progress = Callable[[str, int, int], None]  # (what is happening, steps done, steps in all)

_SPECIALISED_TO_1 = "specialized it to be a constant (1)"  # torch.export's words for a size-1 example dimension
_MESSAGE_CHARS = 2000  # of torch.export's message in an ExportError; the whole of a longer one goes to a file
_LINE_CHARS = 300  # of each line of it


def _capture_failed(e: Exception, path, derived: Optional[tuple] = None) -> str:
    """The ExportError message for a model torch.export could not capture: torch's own message (each line and the
    whole shortened: a data-dependent guard of a detector's post-processing spells a sum over 90 classes, 10 KB,
    before the line naming the code that caused it), the file keeping all of it and the partial graph, and what to
    do where the cause is a data-dependent size or branch, or dimensions made dynamic by the listed shapes
    (``derived``: those dynamic shapes) that the model does not take at every size."""
    from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode
    # torch's advice to call its draft_export() does not apply to hybrid_trt.export (kept in the file below)
    full = f"{type(e).__name__}: {e}"
    text = "\n".join(line for line in full.splitlines() if "draft_export" not in line)
    graph = getattr(e, "partial_fx_graph", None)
    message = f"torch.export could not capture the model: {text}"
    if len(text) > _MESSAGE_CHARS or graph is not None:
        kept = pathlib.Path(f"{pathlib.Path(path).absolute()}.capture-error.txt")
        try:
            kept.write_text(full + (f"\n\nThe graph torch.export had traced when it failed:\n{graph}\n"
                                    if graph else ""))
            where = (f"the whole message and the partial graph are in {kept}" if graph
                     else f"the whole message is in {kept}")
        except OSError as write_error:
            where = f"the whole message could not be written to {kept}: {write_error}"
        lines = "\n".join(line if len(line) <= _LINE_CHARS else f"{line[:_LINE_CHARS]} [...]"
                          for line in text.splitlines())  # torch's hints ("Caused by: <file:line>") come after
        message = f"torch.export could not capture the model ({where}): {lines[:_MESSAGE_CHARS]}"
    cause = e
    while cause is not None and not isinstance(cause, GuardOnDataDependentSymNode):
        cause = cause.__cause__
    if cause is not None:
        message += ("\nThe model has a size or a branch that depends on its data (a detector's score threshold or "
                    "NMS, for one), and an exported package is one graph. Export the part before it (backbone and "
                    "head) and run the rest in PyTorch, or compile the whole model with torch.compile(model, "
                    "backend='hybrid_trt'), which splits the graph where the data decides.")
    dims = {d.__name__: d for spec in derived or () if spec for d in spec.values()}  # (one Dim for tied inputs)
    if dims and ("Constraints violated" in text or any(name in text for name in dims)):
        made = ", ".join(f"{name} [{d.min}..{d.max}]" for name, d in dims.items())
        message += (f"\nThe listed shapes differ, so export made those dimensions dynamic over the listed range "
                    f"({made}), and the model does not take every size in it (torch's 'Constraints violated' or "
                    "failed guard above names the dimension and what the model needs). List shapes that differ "
                    "only where the model takes any size, give dynamic_shapes yourself (a Dim with the range the "
                    "model allows), or export each shape as a package of its own.")
    return message


# ---------------------------------------------------------------------------------------------- export


def export(model: torch.nn.Module, example_inputs, *, dynamic_shapes=None, shapes=None, options=None,
           path, rtol: float = DEFAULT_RTOL, atol: float = DEFAULT_ATOL, compare: Optional[Callable] = None,
           progress: Optional[Progress] = None) -> pathlib.Path:
    """Build engines for every listed input shape, compile the rest with AOTInductor, write one package.

    ``model``: a module, or what torch.export made of one (an ``ExportedProgram`` or its ``module()``, as a
    pt2e-quantized model is), exported in eval mode (a captured module keeps the mode it was captured in).

    ``example_inputs``: a tensor or a tuple of the model's positional arguments: tensors, or tuples, lists and
    dicts of tensors (nested: the package takes each tensor as an input named by its place, ``batch.image``, and
    a loaded package is called with the same structure, or with the tensors alone).
    ``shapes``: the input shapes to build engines for, each a dict ``{input name: shape}`` (inputs not named
    keep the example's shape) or a tuple of tensors; default: the example's shapes. When they differ and
    ``dynamic_shapes`` is None, the dimensions that differ become dynamic.
    ``path``: a directory, or a file ending in .zip, .tar, .tar.gz or .tgz (any case). ``rtol``/``atol``: how
    closely the package must match eager PyTorch on every listed shape (checked here, and again by
    ``hybrid-trt verify``). ``compare``: instead of rtol/atol, a function ``compare(got, expected)`` of the
    flattened outputs (lists of CPU tensors) returning None/True on a match, False or a message otherwise, or
    raising AssertionError: for outputs that are right in another order (a top-k over near-equal scores). Its
    ``module:name`` is recorded; ``hybrid-trt verify --compare`` must be given the same one.
    ``progress``: called as ``progress(what, done, total)`` at each stage (capture, engines, AOTInductor, each
    listed shape's build and check, writing); the command line draws its progress bar from it. Default: nothing.
    Returns the path written. Raises ExportError (a path export will not write or replace included), ValueError
    for bad options, or the model's own error from torch.export.
    """
    from ..options import make_options
    from ..report import new_report

    progress = progress or (lambda what, done, total: None)
    t_start = time.perf_counter()
    try:
        check = OutputCheck(rtol, atol, compare)
    except (TypeError, ValueError) as e:
        raise ExportError(f"hybrid_trt.export: {e}") from None
    if not check.named_as_itself():
        logger.warning("hybrid_trt.export: the comparison is recorded as %s, a name that does not lead back to it (a "
                       "lambda, a local function, a functools.partial or a callable object), so `hybrid-trt verify "
                       "--compare` cannot be given it; define it as a function at the top level of a module",
                       check.compare_name)
    if isinstance(model, torch.export.ExportedProgram):  # what the user exported already: its module
        model = model.module()
    if not isinstance(model, torch.nn.Module):
        raise ExportError(f"hybrid_trt.export takes a torch.nn.Module (or a torch.export.ExportedProgram), not "
                          f"{type(model).__name__} {model!r}; wrap a function in a module whose forward calls it")
    try:
        args, leaves, names, in_spec = example_tensors(model, example_inputs)
    except ValueError as e:
        raise ExportError(f"hybrid_trt.export: {e}") from None
    nested = in_spec is not None
    if nested:  # e.g. forward(batch) with batch = {"image": ..., "points": ...}: the package takes its tensors,
        model = FlatInputs(model, in_spec)  # and a call is flattened by the same structure (DeployedModel)
        args = leaves
        if dynamic_shapes is not None and (not isinstance(dynamic_shapes, (tuple, list))
                                           or len(dynamic_shapes) != len(leaves)):
            raise ExportError("hybrid_trt.export: with nested inputs, give dynamic_shapes per tensor, in the "
                              f"order ({', '.join(names)}), or list shapes=[...] and let the dimensions that "
                              "differ become dynamic")
    # The package's compiled code reads its inputs as contiguous tensors, whatever layout the examples had (a
    # loaded package makes a call's inputs contiguous: DeployedModel).
    cases = [tuple(t.contiguous() for t in case) for case in shape_cases(args, names, shapes)]
    derived = dynamic_shapes is None and len({tuple(tuple(t.shape) for t in c) for c in cases}) > 1
    if derived:
        dynamic_shapes = derived_dynamic_shapes(cases, names)
    else:
        check_listed_shapes(cases, dynamic_shapes, names)
    # Static: the listed shape is the one traced (a single listed shape may differ from the example's).
    export_args = max(cases, key=lambda c: sum(t.numel() for t in c)) if dynamic_shapes is not None else cases[0]
    # Checked before the options are resolved, whose warning ("graphs compile with Inductor alone instead") would
    # contradict the refusal below.
    opts = make_options(options, resolve=False)
    from ..delegates import delegate_names, get_delegate
    # A package is built for its target: no quiet package without a delegate named, or one installed that cannot
    # run as the options configure it (a provider its build lacks). One not installed and not named is left out.
    for name in opts.delegates or delegate_names():
        d = get_delegate(name)
        missing = d.unavailable_reason()
        why = missing if opts.delegates else None
        why = why or (missing is None and d.unusable_with(d.options_from(opts)))
        if why:
            raise ExportError(f"hybrid_trt.export: delegate {name!r} is not usable here: {why}. Export where it is "
                              "(the machine the package is built for), or leave it out of 'delegates' or change "
                              "the option")
    if opts.delegates is not None:  # usable, as checked above: what remains is a contradiction between options
        try:
            opts.resolved_delegates()
        except ValueError as e:
            raise ExportError(f"hybrid_trt.export: {e}") from None
    builders = [n for n in (opts.delegates or delegate_names()) if get_delegate(n).unavailable_reason() is None
                and opts.precision in get_delegate(n).precisions]
    if opts.precision != "fp32" and not builders:
        raise ExportError(f"hybrid_trt.export: precision={opts.precision!r} needs a delegate that builds "
                          f"{opts.precision} engines, and none is usable here. Export on the machine the package is "
                          "built for, or with precision='fp32'")
    opts.resolved_delegates()  # contradictions between options raise here
    path = pathlib.Path(path)
    try:
        pkg.check_replaceable(path)  # before any work: export replaces only a package of its own
    except pkg.PackageError as e:
        raise ExportError(f"hybrid_trt.export: {e}") from None
    staging = pkg.staging_dir(path)
    modes = [(m, m.training) for m in model.modules()]  # the package is the eval-mode model; the caller's modes
    try:                                                 # are put back when export ends, whatever happens
        with torch.no_grad():
            to_eval(model)
            eager = [flat_outputs(_eager_run(model, c)) for c in cases]
        progress("capturing with torch.export", 0, 1)
        from ..capture.exported import capture_export
        # (torch.export reads the dynamic shapes of a forward(*leaves) as those of one argument)
        export_shapes = (tuple(dynamic_shapes),) if nested and dynamic_shapes is not None else dynamic_shapes
        traced = trace_example(export_args, dynamic_shapes, names)
        tiled = traced is not export_args
        try:
            with quiet(SYMBOLIC_SHAPES):
                capture = capture_export(model, traced, dynamic_shapes=export_shapes)
            export_args = traced
        except Exception as tiled_error:
            tiled = False
            try:  # the example as given (a model may tie a size the tiling changed to one it did not)
                if traced is export_args:
                    raise
                with quiet(SYMBOLIC_SHAPES):
                    capture = capture_export(model, export_args, dynamic_shapes=export_shapes)
            except Exception as e:
                # The as-given example failing on a size-1 dimension's specialisation says nothing (tiling exists
                # to avoid it: its "fix" pins the dimension to 1); the tiled trace's error names the real cause
                # (two dimensions the model makes equal, say).
                cause = tiled_error if traced is not export_args and _SPECIALISED_TO_1 in str(e) else e
                raise ExportError(_capture_failed(cause, path, dynamic_shapes if derived else None)) from cause
        _check_bounded(capture, names)
        io = _io(capture.program.call_spec.out_spec, in_spec)  # a structure the manifest cannot hold: said now
        progress("partitioning and building engines", 0, 1)
        report = new_report()
        store_root = staging / pkg.ENGINES
        with quiet(TORCH_CPP_BUILDER):  # measured placement compiles Inductor code too: as backend.py
            stitched, runtimes, graph_reasons = _middle(capture, opts, report, store_root, max(len(cases), 1), args)
        static = [r for r in runtimes if not r.symbolic]
        symbolic = [r for r in runtimes if r.symbolic]
        # steps: each static engine, AOTInductor's compile, each listed shape's run (checked against eager; it builds
        # that shape's engines of the symbolic partitions), writing the package
        total = len(static) + 1 + len(cases) + 1
        done = len(static)
        progress((f"{len(static)} engine(s) built; " if static else "") + "compiling the rest with AOTInductor",
                 done, total)  # (a symbolic partition's engines are built at the first run of a listed shape)
        program = _reexport(stitched, capture, export_args)
        try:
            with quiet(TORCH_CPP_BUILDER), inductor_defects_avoided(dynamic_shapes is not None):
                torch._inductor.aoti_compile_and_package(program, package_path=str(staging / pkg.AOTI_PACKAGE),
                                                         inductor_configs=opts.inductor_patches)
        except Exception as e:
            raise ExportError(f"AOTInductor could not compile the graph left to Inductor: {type(e).__name__}: "
                              f"{e}") from e
        done += 1
        compiled = torch._inductor.aoti_load_package(str(staging / pkg.AOTI_PACKAGE))
        references = []
        for i, (case, expected) in enumerate(zip(cases, eager)):
            progress((f"building engines for input shapes {shapes_text(case)} and checking them against eager"
                      if symbolic else f"checking input shapes {shapes_text(case)} against eager"), done, total)
            try:
                with torch.no_grad():
                    got = flat_outputs(compiled(*case))
            except Exception as e:  # AOTInductor's code (e.g. a kernel its passes chose that this build lacks)
                first = (str(e).strip().splitlines() or [""])[0]
                first = first if len(first) <= _LINE_CHARS else f"{first[:_LINE_CHARS]} [...]"
                raise ExportError(f"the compiled package failed when run on input shapes {shapes_text(case)}: "
                                  f"{type(e).__name__}: {first}. The chained exception shows where (AOTInductor's "
                                  "code for the graph left to Inductor, or an engine); torch.compile(model, "
                                  "backend='hybrid_trt') may still run the model") from e
            try:
                problem = check.problem(got, expected)
            except ComparisonError as e:  # the user's comparison failed: theirs to fix, with its cause chained
                raise ExportError(f"hybrid_trt.export: {e}") from (e.__cause__ or e)
            if problem:
                what = ("Loosen rtol/atol if this is expected numerical difference; give export a compare "
                        "function where outputs can be right and still differ element by element (another order); "
                        "or report the partition (see the report)") if compare is None else (
                    "Check the comparison, or report the partition (see the report)")
                if tiled and [g.shape for g in got] != [e.shape for e in expected]:
                    what = ("torch.export specialises a dimension whose example size is 1, so the model was traced "
                            "with its dynamic dimensions of size 1 at size 2, and at size 1 the model gives outputs "
                            "of another shape (it treats size 1 apart: a squeeze, say). Give those dimensions "
                            "min=2, or export size 1 as a package of its own")
                raise ExportError(f"the compiled package does not match eager PyTorch for input shapes "
                                  f"{shapes_text(case)}: {problem}. {what}")
            done += 1
            references.append(_save_reference(staging, i, case, expected))
        progress("writing the package", done, total)
        _check_runtimes(runtimes)
        del compiled
        partitions = _partition_table(report, runtimes, store_root, staging)
        _warn_shapes_only(partitions)
        manifest = _manifest(capture, cases, names, opts, report, partitions, references, runtimes, check,
                             time.perf_counter() - t_start, io)
        manifest["custom_ops"] = custom_ops.used(program.graph_module.graph)
        if opts.cuda_graphs and graph_reasons:  # asked for replays it cannot have: said now, not first at load
            on_gpu = _device_of(args).type == "cuda"  # (placement times nothing for replays on the CPU)
            logger.warning("hybrid_trt: the package is exported for CUDA graphs but cannot be captured (%s): loaded, "
                           "it runs uncaptured%s. Export it without cuda_graphs (options, HYBRID_TRT_CUDA_GRAPHS)%s",
                           "; ".join(graph_reasons),
                           ", with its partitions placed by replay timings it will not get" if on_gpu else "",
                           " for a package placed for uncaptured calls" if on_gpu else "")
        # reasons empty: load(cuda_graphs=True) captures it whole; placed_for_replay: load's default
        manifest["cuda_graphs"] = {"reasons": graph_reasons, "placed_for_replay": opts.cuda_graphs}
        manifest["plugins"] = list(plugin_registry.callers_of(program.graph_module.graph))
        _prune_store(store_root, partitions)
        manifest["files"] = pkg.file_table(staging)
        pkg.write_manifest(staging, manifest)
        try:
            written = pkg.finish(staging, path)
        except pkg.PackageError as e:  # the path changed meanwhile into something export does not replace
            raise ExportError(f"hybrid_trt.export: {e}") from None
        progress("done", total, total)
        logger.info("hybrid_trt: package written to %s in %.1f s", written, time.perf_counter() - t_start)
        return written
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    finally:
        for module, training in modes:
            module.training = training


def _middle(capture, opts, report, store_root: pathlib.Path, n_shapes: int, example: tuple):
    """The backend's middle passes on the exported graph, building into the package's engine store."""
    from ..backend import _hybrid_graph, _stitched
    from ..engines.runtime import Policy
    from ..engines.store import EngineStore
    store = EngineStore(store_root, pkg.NO_EVICTION)
    policy = Policy(strict=opts.strict, max_engines=max(opts.max_engines_per_partition, n_shapes),
                    ranges=dim_ranges(capture, example))
    opts = dataclasses.replace(opts, cache=True, cache_dir=str(store_root), cache_max_bytes=pkg.NO_EVICTION)
    delegated = _hybrid_graph(capture.gm, capture.weights, len(capture.inputs), opts, report, store, policy, {})
    stitched = _stitched(capture.gm, delegated, capture.inputs, report)
    # Whether a loaded package may replay its whole call from one CUDA graph (load(cuda_graphs=True)) is decided
    # here, where the engines are: their probe needs them built, and it runs on the machine they were built for.
    graph_reasons = cudagraphs.package_reasons(delegated, stitched, _device_of(example))
    return stitched, [d.runtime for d in delegated], graph_reasons


def dim_ranges(capture, example: tuple) -> tuple:
    """``(symbol, min, opt, max)`` of every dynamic dimension with a finite range: the bounds torch.export
    recorded (``dynamic_shapes``' Dims, or derived from the listed shapes), opt the user's example size (the
    shape TensorRT tunes for), clamped into the range."""
    out = {}
    for k, d, expr, r in _dynamic_dims(capture):
        if r is None or not (finite(r.lower) and finite(r.upper)) or str(expr) in out:
            continue
        lo, hi = int(r.lower), int(r.upper)
        out[str(expr)] = (str(expr), lo, min(max(int(example[k].shape[d]), lo), hi), hi)
    return tuple(out[name] for name in sorted(out))


def _check_bounded(capture, names: list[str]) -> None:
    """Every dynamic dimension needs a finite range: a package's engines cover a known range of sizes (TensorRT
    builds a profile for it) and ``verify`` checks the listed ones."""
    for k, d, _expr, r in _dynamic_dims(capture):
        if r is not None and not finite(r.upper):
            name = names[k] if k < len(names) else f"input_{k}"
            raise ExportError(
                f"hybrid_trt.export: dimension {d} of input {name!r} is dynamic without an upper bound; a "
                "package covers a known range of sizes. Give it one (torch.export.Dim(name, min=..., max=...) "
                "in dynamic_shapes), or list the sizes to cover with shapes=[...]")


def _dynamic_dims(capture):
    """``(user input position, dim, symbol, its range or None)`` of every user input dimension that is a symbol."""
    ranges = capture.program.range_constraints
    for k, i in enumerate(capture.user_inputs):
        for d, size in enumerate(capture.inputs[i].shape):
            if not isinstance(size, int) and size.node.expr.is_Symbol:
                yield k, d, size.node.expr, ranges.get(size.node.expr)


class _Stitched(torch.nn.Module):
    """The stitched graph as a module of the user's inputs: the weights it still reads (those Inductor computes
    with; the delegated ones are inside the engines) are its buffers, so AOTInductor embeds them."""

    def __init__(self, gm: torch.fx.GraphModule, weights: dict, n_placeholders: int, user_inputs: list):
        super().__init__()
        self.graph_module = gm
        used = {i for i, n in enumerate(n for n in gm.graph.nodes if n.op == "placeholder") if n.users}
        self._weight_slots = []
        for i, tensor in weights.items():
            if i in used:
                self.register_buffer(f"weight_{i}", tensor)
                self._weight_slots.append((i, f"weight_{i}"))
        self._n = n_placeholders
        self._user = list(user_inputs)

    def forward(self, *inputs):
        args: list[Any] = [None] * self._n
        for i, name in self._weight_slots:
            args[i] = getattr(self, name)
        for i, x in zip(self._user, inputs):
            args[i] = x
        return tuple(self.graph_module(*args))


def _reexport(stitched: torch.fx.GraphModule, capture, example: tuple):
    """torch.export the stitched graph (delegate calls included, as opaque custom ops) for AOTInductor, with
    the same dynamic dimensions and ranges as the capture."""
    from torch.export import Dim
    module = _Stitched(stitched, capture.weights, len(capture.inputs), capture.user_inputs)
    ranges = capture.program.range_constraints
    sizes = [capture.inputs[i].shape for i in capture.user_inputs]
    dims: dict = {}
    for shape in sizes:  # the symbols first: a derived size (2*s0) may come before the input that has s0 itself
        for size in shape:
            if not isinstance(size, int) and size.node.expr.is_Symbol and size.node.expr not in dims:
                r = ranges.get(size.node.expr)
                lo = int(r.lower) if r is not None and finite(r.lower) else 0
                bound = {"max": int(r.upper)} if r is not None and finite(r.upper) else {}
                dims[size.node.expr] = Dim(str(size.node.expr), min=max(lo, 0), **bound)
    spec = []
    for shape in sizes:
        per_input = {d: _export_dim(size.node.expr, dims) for d, size in enumerate(shape) if not isinstance(size, int)}
        spec.append(per_input or None)
    try:
        with torch.no_grad():
            # forward(*inputs): the spec of the one varargs parameter is the tuple of per-input specs
            return torch.export.export(module, tuple(example),
                                       dynamic_shapes=(tuple(spec),) if any(spec) else None, strict=False)
    except Exception as e:
        raise ExportError(f"the stitched graph could not be exported for AOTInductor: {type(e).__name__}: {e}") \
            from e


def _export_dim(expr, dims: dict):
    """The torch.export Dim for a dynamic size: its symbol's Dim, a derived Dim for ``a*s + b`` (torch.export's
    derived dimensions, e.g. ``2*batch``), else AUTO (torch.export works out the relation itself)."""
    from torch.export import Dim
    if expr.is_Symbol:
        return dims[expr]
    if len(expr.free_symbols) == 1:
        (sym,) = expr.free_symbols
        a, b = expr.coeff(sym), expr.subs(sym, 0)
        if sym in dims and a.is_Integer and b.is_Integer and int(a) >= 1 and (a * sym + b - expr).expand() == 0:
            derived = dims[sym] * int(a) if int(a) != 1 else dims[sym]
            return derived + int(b) if int(b) else derived
    return Dim.AUTO


def _check_runtimes(runtimes) -> None:
    """Every partition serves every listed shape from an engine: a fallback or a bound reached at export would
    make the package build (or fail) on the target."""
    problems = []
    for r in runtimes:
        for event in r.report.events:
            problems.append(f"{r.name} ({r.delegate.name}): {event}")
        if r.report.status != "delegated":
            problems.append(f"{r.name} ({r.delegate.name}): {r.report.status}")
    if problems:
        raise ExportError("a delegated partition has no engine for a listed shape: " + "; ".join(problems) +
                          ". Drop the shape, or keep the op with Inductor (force_inductor_ops)")


def _partition_table(report, runtimes, store_root: pathlib.Path, staging: pathlib.Path) -> list[dict]:
    """Per delegated partition: its key, delegate and the store entries (engines per input shape) it uses."""
    entries = _store_entries(store_root)
    by_report = {id(r.report): r for r in runtimes}
    out = []
    for preport in report.partitions:
        runtime = by_report.get(id(preport))
        if runtime is None:
            continue  # fell back to Inductor at build time: compiled into the AOTInductor package
        engines = []
        for path, meta in entries:
            if meta.get("key") == runtime.key or meta.get("partition") == runtime.key:
                engine = {
                    "kind": meta.get("kind"),
                    "signature": meta.get("signature"),
                    "entry": path.relative_to(staging).as_posix(),
                    "files": sorted(meta.get("files", {})),
                    "bytes": sum(int(f.get("size", 0)) for f in meta.get("files", {}).values()),
                }
                if meta.get("kind") == "range":
                    plan = _ranges.RangePlan.from_json(meta["range"])
                    engine.update(store_key=meta["key"], range=plan.text(),
                                  profile=[[list(s) for s in shapes] for shapes in plan.profile()])
                engines.append(engine)
        ranged = [e for e in engines if e["kind"] == "range"]
        out.append({"index": preport.index, "name": runtime.name, "delegate": runtime.delegate.name,
                    "key": runtime.key, "symbolic": runtime.symbolic, "op_count": preport.op_count,
                    "input_shapes": preport.input_shapes, "output_shapes": preport.output_shapes,
                    "size_exprs": _size_exprs(runtime, len(preport.input_shapes)),
                    "delegate_options": pkg.jsonable(runtime.delegate_options),
                    "signatures": [e["signature"] for e in engines if e["kind"] in ("static", "shape")],
                    "ranges": [e["range"] for e in ranged],
                    "per_shape_reason": None if ranged or not runtime.symbolic else
                    (runtime.range_note or "no dynamic dimension with a finite range"),
                    "engines": engines})
    return out


def _warn_shapes_only(partitions: list[dict]) -> None:
    """A partition of a dynamic graph that got engines per listed shape, not one for the range, serves those shapes
    only: a load refuses any other with EngineNotInPackage. Said at export, where the user can still list more."""
    for p in partitions:
        if p["per_shape_reason"]:
            logger.warning("hybrid_trt.export: partition %d (%s) has engines for the listed input shapes only (%s), "
                           "not one for the dynamic range, because %s; the package refuses other shapes. List every "
                           "shape it must serve (shapes=[...], or --shape)", p["index"], p["delegate"],
                           ", ".join(p["signatures"]) or "none", p["per_shape_reason"])


def _size_exprs(runtime, n_tensor_inputs: int) -> Optional[list]:
    """The partition's size arguments (after its tensor inputs) as ints or expressions of the model's input
    sizes, as ``input_shapes`` writes sizes: what load's EngineCheck reads. None (not checked before the call)
    where an argument is anything else."""
    values = [n.meta.get("val") for n in runtime.module.graph.nodes if n.op == "placeholder"][n_tensor_inputs:]
    if not all(isinstance(v, (int, torch.SymInt)) for v in values):
        return None
    return [v if isinstance(v, int) else str(v) for v in values]


def _store_entries(store_root: pathlib.Path) -> list[tuple[pathlib.Path, dict]]:
    out = []
    for meta_path in sorted(store_root.glob("v*/*/*/meta.json")):
        try:
            out.append((meta_path.parent, json.loads(meta_path.read_text())))
        except (OSError, ValueError):
            continue
    return out


def _prune_store(store_root: pathlib.Path, partitions: list[dict]) -> None:
    """Entries no partition of the final graph uses (a partition that fell back after building), and the
    store's lock files, are not shipped. Entries that are shipped keep only what a load reads
    (``_slim_entries``)."""
    used = {e["entry"].split("/", 1)[1] for p in partitions for e in p["engines"]}
    for path, _meta in _store_entries(store_root):
        if path.relative_to(store_root).as_posix() not in used:
            shutil.rmtree(path, ignore_errors=True)
    _slim_entries(store_root)
    shutil.rmtree(store_root / "locks", ignore_errors=True)
    shutil.rmtree(store_root / "shared", ignore_errors=True)  # builds' shared caches: a package never builds
    for p in partitions:  # the table's file lists and sizes follow the slimmed entries
        for e in p["engines"]:
            meta = json.loads((store_root.parent / e["entry"] / "meta.json").read_text())
            e["files"] = sorted(meta["files"])
            e["bytes"] = sum(int(f["size"]) for f in meta["files"].values())


def _slim_entries(store_root: pathlib.Path) -> None:
    """Each entry again with only the files a deploy-mode load reads: the engine's form that loads
    (``Delegate.deploy_files``: ONNX Runtime's optimized model, not also the lowered one) and no recipe (the
    partition's FX module with its weights, read only to fall back to Inductor or to build a new shape, which a
    loaded package never does). Each of these held the partition's weights once more. The engine cache keeps every form; only the package drops them."""
    from ..delegates import get_delegate
    from ..engines.runtime import _ENGINE_PREFIX
    from ..engines.store import EngineStore
    store = EngineStore(store_root, pkg.NO_EVICTION)
    for path, meta in _store_entries(store_root):
        engine_names = [n[len(_ENGINE_PREFIX):] for n in meta["files"] if n.startswith(_ENGINE_PREFIX)]
        keep = {_ENGINE_PREFIX + n for n in get_delegate(meta["delegate"]).deploy_files(engine_names)}
        drop = sorted(set(meta["files"]) - keep)
        if not drop:
            continue
        entry = store.get(meta["key"])  # verified against its checksums before it is written again
        if entry is None:
            raise ExportError(f"the engine entry {path} is damaged in the package being written")
        files = {name: entry.files[name] for name in sorted(keep)}
        shutil.rmtree(path)
        kept_meta = {k: v for k, v in entry.meta.items() if k not in ("format", "key", "files", "created")}
        if store.put(meta["key"], files, {**kept_meta, "package_dropped": drop}) is None:
            raise ExportError(f"could not write the engine entry {path} of the package being written (the disk "
                              "is full or not writable: see the engine cache warning above); free space or make "
                              "the package's directory writable, and export again")
        logger.debug("hybrid_trt: package entry %s: dropped %s (not read by a load)", meta["key"][:12], drop)


def _manifest(capture, cases, names, opts, report, partitions, references, runtimes, check: OutputCheck,
              seconds, io: dict) -> dict:
    """``io``: the structure of the outputs and of nested inputs (``_io``)."""
    from .. import __version__
    from ..engines.key import environment
    device = _device_of(cases[0])
    delegates = sorted({r.delegate.name for r in runtimes})
    env = {d: environment(d, device) for d in delegates}
    return {
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "export_seconds": round(seconds, 3),
        "hybrid_trt": __version__,
        "device": str(device),
        "versions": pkg.current_versions(delegates, device),
        "gpu_arch": pkg.current_arch(device),
        "environment": env,
        # the export machine's cache location means nothing where the package is loaded (it never uses a cache)
        "options": pkg.jsonable({k: v for k, v in dataclasses.asdict(opts).items() if k != "cache_dir"}),
        "inputs": [{"name": n, "dtype": str(t.dtype).replace("torch.", ""),
                    "dynamic_dims": [d for d, s in enumerate(capture.inputs[i].shape) if not isinstance(s, int)],
                    "dims": describe_dims(capture.inputs[i].shape, capture.program.range_constraints)}
                   for n, t, i in zip(names, cases[0], capture.user_inputs)],
        "shapes": [[list(t.shape) for t in case] for case in cases],
        "io": io,
        "partitions": partitions,
        "reference": references,
        "tolerance": check.to_manifest(),
        "report": pkg.jsonable(report.to_dict()),
        "report_text": report.table(),
    }


def _io(out_spec, in_spec) -> dict:
    """The manifest's "io": the outputs' structure, and the nested inputs' (absent when each input is a tensor);
    namedtuples beside each (structure.py). ExportError for a structure torch cannot write (a type of its own)."""
    io = {}
    for side, spec in (("out", out_spec), ("in", in_spec)):
        if spec is not None:
            try:
                io[f"{side}_spec"], namedtuples = structure.dumps(spec)
            except Exception as e:  # torch's serializer: a pytree node type it has no name for
                raise ExportError(f"hybrid_trt.export: the model's {'outputs' if side == 'out' else 'inputs'} have "
                                  f"a structure a package cannot record ({type(e).__name__}: {e}); use tensors in "
                                  "tuples, lists, dicts or namedtuples") from e
            if namedtuples is not None:
                io[f"{side}_namedtuples"] = namedtuples
    return io


def flat_outputs(out) -> list[torch.Tensor]:
    leaves = pytree.tree_leaves(out)
    # A Python number (a float constant, a size) has no faithful place in AOTInductor's outputs: a float failed
    # inside its compile, an int came back as a tensor.
    odd = [f"output {i}: {type(x).__name__}" + (f" {x!r}" if isinstance(x, (bool, int, float)) else "")
           for i, x in enumerate(leaves) if not isinstance(x, torch.Tensor)]
    if odd:
        raise ExportError(f"hybrid_trt.export: the model returns values a package cannot ({', '.join(odd)}, "
                          "counted over its flattened outputs); return tensors (in tuples, lists or dicts) only: "
                          "wrap a number in torch.tensor(...) or leave it out of the outputs")
    return [x.detach() for x in leaves]


def _eager_run(model, case):
    try:
        return model(*case)
    except Exception as e:
        raise ExportError(f"hybrid_trt.export: the model itself fails on its example inputs at input shapes "
                          f"{shapes_text(case)}, run by eager PyTorch before any export work: {type(e).__name__}: {e}. "
                          "Check the example inputs (a factory's, or the listed shapes)") from e


def _save_reference(staging: pathlib.Path, i: int, case, expected) -> dict:
    (staging / pkg.REFERENCE).mkdir(exist_ok=True)
    name = f"{pkg.REFERENCE}/case_{i}.pt"
    torch.save({"inputs": [t.detach().cpu() for t in case], "outputs": [t.cpu() for t in expected]},
               staging / name)
    return {"file": name, "input_shapes": [list(t.shape) for t in case]}


def _device_of(case) -> torch.device:
    return next((t.device for t in case if isinstance(t, torch.Tensor)), torch.device("cpu"))
