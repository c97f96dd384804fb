"""``hybrid-trt``: export a model to a package, inspect, verify and benchmark packages.

    hybrid-trt export MODULE:FACTORY --out PATH [--shape NAME=1x3x224x224[,NAME=...]]
                      [--dynamic NAME:DIM[=[SYMBOL:]MIN:MAX]] [--option KEY=VALUE]
                      [--rtol R] [--atol A] [--compare MODULE:FUNCTION] [--quiet] [--traceback]
    hybrid-trt inspect PATH [--json]
    hybrid-trt verify PATH [--json] [--[no-]cuda-graphs] [--compare MODULE:FUNCTION] [--import MODULE]
    hybrid-trt bench PATH [--model MODULE:FACTORY] [--iters N] [--warmup N] [--[no-]cuda-graphs] [--json]
                     [--import MODULE]

FACTORY is a function of MODULE (an importable module, or a path to a .py file) that returns the model and its
example inputs (a tensor, or a tuple of tensors and tuples, lists or dicts of tensors). Exit codes: 0 success;
1 export or bench failed; 2 bad arguments; verify, and inspect or bench on a package they cannot open: the first
failing check's code (``package.EXIT_CODES``: 3 manifest, 4 missing file, 5 checksum, 6 version/architecture, 7
reference outputs, 8 a reference shape not captured in a CUDA graph); 130 interrupted.
"""
from __future__ import annotations

import argparse
import dataclasses
import importlib
import importlib.util
import json
import pathlib
import re
import statistics
import sys
import time
from typing import Optional

EXIT_FAILED = 1
EXIT_USAGE = 2


class UsageError(Exception):
    pass


def main(argv: Optional[list[str]] = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        return args.run(args)
    except UsageError as e:
        print(f"hybrid-trt {args.command}: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print(f"hybrid-trt {args.command}: interrupted", file=sys.stderr)
        return 130


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hybrid-trt", description="Build hybrid_trt packages ahead of time and check them on the target.",
        epilog="Run 'hybrid-trt COMMAND --help' for a command's options.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("export", help="export a model to a package (engines per input shape + AOTInductor)",
                       description="Capture MODULE:FACTORY's model with torch.export, build an engine for every "
                       "delegated partition and listed input shape, compile the rest with AOTInductor and write "
                       "one package (a directory, or a .zip, .tar or .tgz file).")
    p.add_argument("factory", metavar="MODULE:FACTORY",
                   help="function returning (model, example_inputs); MODULE is importable or a .py path")
    p.add_argument("--out", required=True, metavar="PATH",
                   help="package directory, or a file ending .zip, .tar, or .tar.gz/.tgz (gzip); any case")
    p.add_argument("--shape", action="append", default=[], metavar="NAME=1x3x224x224[,NAME=...]",
                   help="input shapes to build engines for; repeat for several shapes (inputs not named keep the "
                   "example's shape). Default: the example's shapes")
    p.add_argument("--dynamic", action="append", default=[], metavar="NAME:DIM[=[SYMBOL:]MIN:MAX]",
                   help="make dimension DIM (from 0) of input NAME dynamic over MIN..MAX; repeatable. Dimensions "
                   "given one SYMBOL are one dimension, of equal size (a batch shared by two inputs): give its "
                   "range once, e.g. --dynamic image:0=batch:1:8 --dynamic features:0=batch. Without a range: "
                   "the range of the sizes the --shape values list. Default: dimensions that differ among the "
                   "--shape values (equal ones tied)")
    p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="a hybrid_trt option (see README: Options); repeatable")
    p.add_argument("--rtol", type=float, default=None, help="relative tolerance against eager (default 1e-3)")
    p.add_argument("--atol", type=float, default=None, help="absolute tolerance against eager (default 1e-4)")
    _compare_argument(p, "instead of --rtol/--atol, compare the package's outputs with eager's by FUNCTION(got, "
                      "expected): for outputs that are right in another order (a top-k over near-equal scores). "
                      "verify needs the same --compare")
    p.add_argument("--quiet", action="store_true", help="no progress bar and no report")
    p.add_argument("--traceback", action="store_true", help="show the traceback of an unexpected failure")
    p.set_defaults(run=_export)

    p = sub.add_parser("inspect", help="print a package's manifest as tables",
                       description="Print partitions, delegates, shapes, engine sizes and versions of a package.")
    p.add_argument("path", metavar="PATH", help="package directory or .zip/.tar/.tgz file")
    p.add_argument("--json", action="store_true", help="print the manifest as JSON")
    p.set_defaults(run=_inspect)

    p = sub.add_parser("verify", help="check a package: checksums, versions, reference outputs",
                       description="Check every file's checksum, this machine's versions and GPU architecture "
                       "against the package's, and run the reference inputs against the stored outputs. Prints "
                       "a verdict per check; exits 0 only when all pass (codes: 3 manifest, 4 missing file, "
                       "5 checksum mismatch, 6 version/architecture mismatch, 7 reference outputs, 8 a reference shape not "
                       "captured in a CUDA graph).")
    p.add_argument("path", metavar="PATH", help="package directory or .zip/.tar/.tgz file")
    p.add_argument("--json", action="store_true", help="print the verdicts as JSON")
    p.add_argument("--cuda-graphs", action=argparse.BooleanOptionalAction, default=None,
                   help="run the reference inputs as load(cuda_graphs=True) does (uncaptured, captured, replayed) "
                        "and check that each shape was captured (exit code 8 otherwise); default: as the package "
                        "was exported for")
    _compare_argument(p, "the comparison the package was exported with (its manifest names it; verify does not "
                      "import code a package names)")
    _import_argument(p)
    p.set_defaults(run=_verify)

    p = sub.add_parser("bench", help="latency of a package (and of eager PyTorch) on its reference inputs",
                       description="Load the package and time it on its reference inputs: median and "
                       "percentiles. With --model, the eager model is timed on the same inputs beside it.")
    p.add_argument("path", metavar="PATH", help="package directory or .zip/.tar/.tgz file")
    p.add_argument("--model", metavar="MODULE:FACTORY", help="the model's factory, to time eager PyTorch too")
    p.add_argument("--iters", type=int, default=50, help="timed calls per input shape (default 50)")
    p.add_argument("--warmup", type=int, default=5, help="untimed calls first (default 5)")
    p.add_argument("--cuda-graphs", action=argparse.BooleanOptionalAction, default=None,
                   help="load with cuda_graphs=True (each shape's call replayed from one CUDA graph) or False; "
                        "default: as the package was exported for")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    _import_argument(p)
    p.set_defaults(run=_bench)
    return parser


def _compare_argument(p, text: str) -> None:
    p.add_argument("--compare", metavar="MODULE:FUNCTION", help=f"{text}. FUNCTION takes two lists of tensors "
                   "(the outputs, flattened) and returns None or True on a match, False or a message otherwise, "
                   "or raises AssertionError")


def _import_argument(p) -> None:
    p.add_argument("--import", dest="imports", action="append", default=[], metavar="MODULE",
                   help="import MODULE (or a .py file) first: the library that defines custom ops the package "
                   "calls (the manifest's custom_ops; 'inspect' lists them); repeatable")


# ---------------------------------------------------------------------------------------------- export


def _export(args) -> int:
    from .api import DEFAULT_ATOL, DEFAULT_RTOL, ExportError, export
    from .package import PackageError
    _check_out(args.out)
    shapes = [parse_shape(s) for s in args.shape] or None
    arguments = parse_dynamic(args.dynamic)
    options = parse_options(args.option)
    compare = load_function(args.compare, "FUNCTION") if args.compare else None  # a usage error before any work
    from .reference_check import OutputCheck
    try:
        OutputCheck(DEFAULT_RTOL if args.rtol is None else args.rtol, DEFAULT_ATOL if args.atol is None else args.atol)
    except ValueError as e:
        raise UsageError(f"--{e}") from None
    model, example, dynamic = _model_and_dims(args.factory, shapes, arguments)
    bar = None if args.quiet else ProgressBar()
    try:
        path = export(model, example, dynamic_shapes=dynamic, shapes=shapes, options=options, path=args.out,
                      rtol=DEFAULT_RTOL if args.rtol is None else args.rtol,
                      atol=DEFAULT_ATOL if args.atol is None else args.atol,
                      compare=compare, progress=bar.update if bar else None)
    except (ExportError, PackageError, ValueError) as e:
        if bar:
            bar.close()
        print(f"hybrid-trt export: error: {e}{_tie_hint(str(e), arguments)}", file=sys.stderr)
        return EXIT_FAILED
    except Exception as e:  # noqa: BLE001 - the command reports any failure readably
        if bar:
            bar.close()
        print(f"hybrid-trt export: error: export failed with {type(e).__name__}: {e}"
              + ("" if args.traceback else "\n(--traceback shows where)"), file=sys.stderr)
        if args.traceback:
            raise
        return EXIT_FAILED
    if bar:
        bar.close()
    if not args.quiet:
        from .package import open_package
        print(open_package(path).manifest.get("report_text", ""))
    print(f"package written: {path}")
    return 0


def _check_out(out: str) -> None:
    """An --out export would refuse (empty, an archive suffix no package is written as, .tar.xz or .7z, or a file
    or directory that is not a package) is a usage error, before the model is built (export itself would refuse it
    as well, as a failure)."""
    from .package import PackageError, check_replaceable
    if not out.strip():
        raise UsageError("--out is empty; give the package's path (a directory, or a .zip, .tar or .tgz file)")
    try:
        check_replaceable(pathlib.Path(out))
    except PackageError as e:
        raise UsageError(f"--out {e}") from None


def _model_and_dims(factory: str, shapes: Optional[list[dict]], arguments: list["DynamicDim"]):
    """The factory's model and example inputs, and torch.export's dynamic_shapes for the --dynamic arguments
    (None without any); bad --shape/--dynamic values are usage errors (exit 2), found before anything is built."""
    from .example_inputs import example_tensors
    model, example = load_factory(factory)
    try:
        example, leaves, names, _ = example_tensors(model, example)  # nested: an input per tensor ("batch.image")
    except ValueError as e:
        raise UsageError(f"{factory} returned {e}") from None
    listed = listed_shapes(shapes, names, leaves)
    return model, example, (_dynamic_spec(arguments, names, listed) if arguments else None)


_NOT_TIED = re.compile(r"The values of (\w+) = .*? and (\w+) = .*? must always be equal")


def _tie_hint(message: str, arguments: list["DynamicDim"]) -> str:
    """What to pass when torch.export finds two --dynamic dimensions always equal (a batch shared by two inputs):
    each untied argument is a Dim of its own, which torch.export refuses. The Dim names in the message are mapped
    back to the arguments that made them, nested input names ("batch.image") included."""
    from .example_inputs import dim_name
    found = _NOT_TIED.search(message)
    if not found:
        return ""
    by_dim_name = {dim_name(d.name, d.dim): d for d in arguments if not d.symbol}
    pair = [by_dim_name.get(found[1]), by_dim_name.get(found[2])]
    if None in pair:
        return ""
    a, b = (f"{d.name}:{d.dim}" for d in pair)
    given = next((d.bounds for d in pair if d.bounds), None)
    rng = f":{given[0]}:{given[1]}" if given else ""
    return (f"\nThe model makes {a} and {b} equal: tie them with one SYMBOL, e.g. --dynamic {a}=batch{rng} "
            f"--dynamic {b}=batch (see hybrid-trt export --help)")


def parse_shape(text: str) -> dict:
    """``x=1x3x224x224,y=1x10`` -> {"x": (1, 3, 224, 224), "y": (1, 10)}."""
    out = {}
    for item in text.split(","):
        name, sep, dims = item.partition("=")
        try:
            if not sep or not name.strip():
                raise ValueError
            out[name.strip()] = tuple(int(d) for d in dims.lower().split("x"))
        except ValueError:
            raise UsageError(f"--shape {text!r}: expected NAME=1x3x224x224 (several inputs: "
                             "NAME=...,NAME=...)") from None
        if any(d < 0 for d in out[name.strip()]):
            raise UsageError(f"--shape {text!r}: a size is negative; sizes are 0 or more (a range of sizes is "
                             "given with --dynamic NAME:DIM=MIN:MAX)")
    return out


@dataclasses.dataclass(frozen=True)
class DynamicDim:
    """One ``--dynamic NAME:DIM[=[SYMBOL:]MIN:MAX]`` or ``NAME:DIM=SYMBOL`` argument."""
    text: str  # as given, to name it in errors
    name: str
    dim: int
    symbol: Optional[str]  # dimensions with one symbol are one torch.export Dim (a batch shared by two inputs)
    bounds: Optional[tuple[int, int]]  # None: the symbol's range given elsewhere, or the listed sizes' range


_DYNAMIC_FORM = ("expected NAME:DIM[=MIN:MAX], or NAME:DIM=SYMBOL[:MIN:MAX] to tie dimensions (one SYMBOL, one "
                 "size), with 0 <= MIN < MAX, e.g. x:0=1:8 or image:0=batch:1:8 --dynamic features:0=batch")


def parse_dynamic(items: list[str]) -> list[DynamicDim]:
    """``["x:0=1:8", "y:1", "a:0=b:1:4", "c:0=b"]`` -> DynamicDim per argument; the syntax and the range are
    checked here, the input names, dimension indices and tied ranges once the model is known (``_dynamic_spec``)."""
    return [_parse_dynamic_one(text) for text in items]


def _parse_dynamic_one(text: str) -> DynamicDim:
    head, sep, rng = text.partition("=")
    name, _, dim = head.partition(":")
    parts = rng.split(":") if sep else []
    symbol = parts.pop(0) if parts and parts[0].isidentifier() else None
    try:
        dim = int(dim)
        bounds = tuple(int(b) for b in parts) if parts else None
    except ValueError:
        raise UsageError(f"--dynamic {text!r}: {_DYNAMIC_FORM}") from None
    if not name.strip() or (bounds is not None and len(bounds) != 2) or (sep and not symbol and not bounds):
        raise UsageError(f"--dynamic {text!r}: {_DYNAMIC_FORM}")
    if dim < 0:
        raise UsageError(f"--dynamic {text!r}: DIM {dim} is negative; dimensions count from 0 (x:0 is the first)")
    if bounds is not None and not 0 <= bounds[0] < bounds[1]:
        # torch.export's Dim asserts on these; a package needs a range of at least two sizes
        raise UsageError(f"--dynamic {text!r}: the range {bounds[0]}:{bounds[1]} is empty or negative; give "
                         "MIN:MAX with 0 <= MIN < MAX (for one size, list it with --shape instead)")
    return DynamicDim(text, name.strip(), dim, symbol, bounds)


def listed_shapes(shapes: Optional[list[dict]], names: list[str], example: tuple) -> list[list[tuple]]:
    """The input shapes of every case export will trace or run (the --shape entries, inputs not named keeping the
    example's shape; else the example's), after checking the --shape names and ranks against the model's."""
    if not shapes:
        return [[tuple(t.shape) for t in example]]
    cases = []
    for entry in shapes:
        unknown = sorted(set(entry) - set(names))
        if unknown:
            raise UsageError(f"--shape names unknown input(s) {unknown}; the model's inputs are {names}")
        case = []
        for name, t in zip(names, example):
            shape = tuple(entry.get(name, t.shape))
            if len(shape) != t.dim():
                raise UsageError(f"--shape {name}={'x'.join(map(str, shape))}: {len(shape)} dimensions; input "
                                 f"{name!r} has {t.dim()} (the example is {'x'.join(map(str, t.shape))})")
            case.append(shape)
        cases.append(case)
    return cases


def _dynamic_spec(dynamic: list[DynamicDim], names: list[str], listed: list[list[tuple]]) -> tuple:
    """torch.export's dynamic_shapes for the --dynamic arguments, checked against the model's inputs and the
    listed shapes (torch.export's own errors for these are assertions and index errors): one Dim per SYMBOL
    (or per untied dimension), over its given range or else the listed sizes' range."""
    from torch.export import Dim

    from .example_inputs import dim_name
    by_dim: dict = {}
    for arg in dynamic:
        _check_dynamic_dim(arg, names, listed)
        earlier = by_dim.setdefault((arg.name, arg.dim), arg)
        if (earlier.symbol, earlier.bounds) != (arg.symbol, arg.bounds):
            raise UsageError(f"--dynamic {earlier.text!r} and --dynamic {arg.text!r} name one dimension twice, "
                             "differently; give it once")
    groups: dict = {}  # the dimensions of one Dim: a SYMBOL's, or one untied dimension
    for (name, d), arg in by_dim.items():
        groups.setdefault(arg.symbol or dim_name(name, d), []).append(arg)
    spec: list = [{} for _ in names]
    for symbol, args in groups.items():
        lo, hi = _group_range(symbol, args, names, listed)
        dim = Dim(symbol, min=lo, max=hi)
        for arg in args:
            spec[names.index(arg.name)][arg.dim] = dim
    return tuple(dims or None for dims in spec)


def _group_range(symbol: str, args: list[DynamicDim], names: list[str], listed: list[list[tuple]]) -> tuple:
    """The range of one Dim: given once (or equally by every argument naming it), else the range of the sizes the
    example or the --shape entries give its dimensions; every such size inside it, equal ones where tied."""
    given = {a.bounds: a for a in args if a.bounds is not None}
    what = f"{symbol!r}" if args[0].symbol else f"input {args[0].name!r} dimension {args[0].dim}"
    if len(given) > 1:
        first, second = list(given.values())[:2]
        raise UsageError(f"--dynamic {first.text!r} and --dynamic {second.text!r} give {symbol!r} two ranges; give "
                         f"its range once (e.g. {first.text} and {second.name}:{second.dim}={symbol})")
    sizes = []
    for case in listed:
        case_sizes = {a: case[names.index(a.name)][a.dim] for a in args}
        if len(set(case_sizes.values())) > 1:
            raise UsageError(f"--dynamic ties {' and '.join(f'{a.name}:{a.dim}' for a in args)} (symbol {symbol!r}), "
                             f"but the example or a --shape gives them the sizes "
                             f"{', '.join(f'{a.name}:{a.dim}={n}' for a, n in case_sizes.items())}; tied "
                             "dimensions have one size: change the shapes or use two symbols")
        sizes += case_sizes.values()
    if given:
        (lo, hi), arg = next(iter(given.items()))
        outside = [n for n in sizes if not lo <= n <= hi]
        if outside:
            raise UsageError(f"--dynamic {arg.text!r}: the example or a --shape gives {what} the size "
                             f"{outside[0]}, outside {lo}..{hi}; widen the range or change the shape")
        return lo, hi
    if len(set(sizes)) < 2:
        first = args[0]
        form = f"{first.name}:{first.dim}=" + (f"{first.symbol}:" if first.symbol else "") + "MIN:MAX"
        raise UsageError(f"--dynamic {first.text!r} gives no range, and the listed sizes of {what} are all "
                         f"{sizes[0]}; give one ({form}) or list several sizes with --shape")
    return min(sizes), max(sizes)


def _check_dynamic_dim(arg: DynamicDim, names: list[str], listed: list[list[tuple]]) -> None:
    if arg.name not in names:
        raise UsageError(f"--dynamic {arg.text!r} names unknown input {arg.name!r}; the model's inputs are {names}")
    rank = len(listed[0][names.index(arg.name)])
    if arg.dim >= rank:
        raise UsageError(f"--dynamic {arg.text!r}: input {arg.name!r} has {rank} dimension(s), numbered 0 to "
                         f"{rank - 1}; there is no dimension {arg.dim}")


def parse_options(items: list[str]) -> dict:
    out = {}
    for text in items:
        key, sep, value = text.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--option {text!r}: expected KEY=VALUE, e.g. min_block_size=3")
        out[key.strip()] = value
    try:
        from ..options import make_options
        make_options(out, resolve=False)  # unknown keys and bad values are usage errors, named before anything
        # is built (whether the delegates are usable here, export itself says)
    except ValueError as e:
        raise UsageError(str(e)) from None
    return out


def import_user_module(module_name: str):
    """A module by name (the current directory first on the path), or a .py file by path, imported as Python
    imports a script's neighbours: its directory goes on the path, and it is registered under its file name's stem
    (a stem naming another module, ``onnx.py``, is refused: it would replace that module). Raises UsageError,
    also for an error the module raises while it is imported."""
    if str(pathlib.Path.cwd()) not in sys.path:
        sys.path.insert(0, str(pathlib.Path.cwd()))
    try:
        if module_name.endswith(".py"):
            path = pathlib.Path(module_name)
            loader = importlib.util.spec_from_file_location(path.stem, path)
            if loader is None or not path.is_file():
                raise ImportError(f"no file {path}")
            other = _module_origin(path.stem)
            if other is not None and other != str(path.resolve()):
                raise UsageError(f"cannot import {module_name!r}: {path.stem!r} is the name of another module "
                                 f"({other}), which it would replace; rename the file")
            folder = str(path.resolve().parent)
            if folder not in sys.path:  # its own imports of files beside it work, as when Python runs it
                sys.path.insert(1, folder)
            module = importlib.util.module_from_spec(loader)
            sys.modules[path.stem] = module
            try:
                loader.loader.exec_module(module)
            except BaseException:
                del sys.modules[path.stem]
                raise
            return module
        return importlib.import_module(module_name)
    except ImportError as e:
        raise UsageError(f"cannot import {module_name!r}: {e}") from None
    except UsageError:
        raise
    except Exception as e:  # the user's code failed while importing: say where, keep its traceback as the cause
        raise UsageError(f"importing {module_name!r} raised {type(e).__name__}: {e}") from e


def _module_origin(name: str):
    """Where the module ``name`` comes from (a resolved file path, or "built in"), None when there is none."""
    known = sys.modules.get(name)
    try:
        spec = known.__spec__ if known is not None else importlib.util.find_spec(name)
    except (ImportError, ValueError, AttributeError):
        spec = None
    if known is None and spec is None:
        return None
    origin = getattr(spec, "origin", None) or getattr(known, "__file__", None)
    return str(pathlib.Path(origin).resolve()) if origin and origin not in ("built-in", "frozen") else "built in"


def load_function(spec: str, what: str):
    """The function MODULE:NAME names (NAME may be dotted: a class's static method). Raises UsageError."""
    module_name, sep, attr = spec.rpartition(":")
    if not sep or not module_name or not attr:
        raise UsageError(f"{spec!r}: expected MODULE:{what}, e.g. examples.factories:"
                         f"{'resnet18' if what == 'FACTORY' else 'compare_detector'}")
    obj = import_user_module(module_name)
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise UsageError(f"{module_name} has no function {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise UsageError(f"{module_name}.{attr} is a {type(obj).__name__}, not a function")
    return obj


def load_factory(spec: str):
    factory = load_function(spec, "FACTORY")
    try:
        result = factory()
    except Exception as e:  # the user's code: say where it failed, and keep its traceback as the cause
        raise UsageError(f"{spec}() raised {type(e).__name__}: {e}") from e
    if not (isinstance(result, (tuple, list)) and len(result) == 2):
        raise UsageError(f"{spec} must return (model, example_inputs); got {type(result).__name__}")
    return result


class ProgressBar:
    """tqdm when installed, else a counter on stderr."""

    def __init__(self):
        try:
            from tqdm import tqdm
            self._tqdm = tqdm(total=1, unit="step", file=sys.stderr, leave=False)
        except ImportError:
            self._tqdm = None
        self._last = ""

    def update(self, what: str, done: int, total: int) -> None:
        if self._tqdm is not None:
            self._tqdm.total = total
            self._tqdm.n = done
            self._tqdm.set_description(what, refresh=False)
            self._tqdm.refresh()  # once per step (set_description's own refresh wrote each step twice)
        elif what != self._last:
            print(f"[{done}/{total}] {what}", file=sys.stderr, flush=True)
        self._last = what

    def close(self) -> None:
        if self._tqdm is not None:
            self._tqdm.close()


# ---------------------------------------------------------------------------------------------- inspect


def _inspect(args) -> int:
    from .package import PackageError, check_files, open_package
    try:
        package = open_package(args.path)
    except PackageError as e:
        print(f"hybrid-trt inspect: error: {e}", file=sys.stderr)
        return e.exit_code
    if args.json:
        print(json.dumps(package.manifest, indent=1))
    else:
        _print_manifest(package)
    # The manifest shows what the package should hold; a file missing or damaged since is said, and is the exit code.
    failed = [c for c in check_files(package) if c.passed is False]
    for check in failed:
        print(f"hybrid-trt inspect: error: {check.detail}", file=sys.stderr)
    return failed[0].exit_code if failed else 0


def _print_manifest(package) -> None:
    from .input_dims import DimCheck
    m = package.manifest
    print(f"package {package.source} (format {m['format_version']}, created {m.get('created')}, "
          f"device {m.get('device')}, gpu arch {m.get('gpu_arch')})")
    print("versions: " + ", ".join(f"{k} {v}" for k, v in m.get("versions", {}).items()))
    print("inputs:   " + ", ".join(f"{i['name']} {i['dtype']}" + (f" dynamic dims {i['dynamic_dims']}"
                                                                  if i["dynamic_dims"] else "")
                                   for i in m["inputs"]))
    if any(i.get("dims") and i["dynamic_dims"] for i in m["inputs"]):
        print("sizes:    " + DimCheck(m["inputs"]).spec_text(m["inputs"]))
    print("shapes:   " + "; ".join(", ".join("x".join(map(str, s)) for s in case) for case in m["shapes"]))
    rows = [("#", "delegate", "ops", "kind", "engines (input shapes)", "size")]
    for p in m["partitions"]:
        size = sum(e["bytes"] for e in p["engines"])
        shapes = list(p["signatures"]) + [f"range {r}" for r in p.get("ranges", [])]
        rows.append((str(p["index"]), p["delegate"], str(p["op_count"]), "dynamic" if p["symbolic"] else "static",
                     "; ".join(shapes) or "-", _bytes(size)))
    print(_table(rows))
    for p in m["partitions"]:
        if p.get("per_shape_reason"):
            print(f"partition {p['index']}: engines per shape, not one for the range: {p['per_shape_reason']}")
    files = m["files"]
    total = sum(f["size"] for f in files.values())
    aoti = files.get("model.pt2", {}).get("size", 0)
    print(f"files: {len(files)}, {_bytes(total)} (AOTInductor package {_bytes(aoti)})")
    ops = [op for op in m.get("custom_ops", []) if not op["module"] or not op["module"].startswith("hybrid_trt.")]
    if ops:  # hybrid_trt's own ops are registered by importing it (load imports its plugins itself)
        print("custom ops (import their modules before loading): " + ", ".join(
            f"{op['op']} ({op['module'] or 'module unknown'})" for op in ops))
    from .package import placed_for_replay, replays_by_default
    reasons = (m.get("cuda_graphs") or {}).get("reasons")
    print("CUDA graphs: " + ("not recorded (an earlier hybrid_trt wrote the package)" if reasons is None else
                             "load(cuda_graphs=True) captures each shape's whole call" if not reasons else
                             "load(cuda_graphs=True) runs it uncaptured: " + "; ".join(reasons))
          + ("; exported for calls without CUDA graphs (load's default)" if not placed_for_replay(m) else
             "; exported for CUDA-graph replay" + (" (load's default)" if replays_by_default(m) else "")))
    tol = m.get("tolerance", {})
    print("reference check: " + (f"by {tol['compare']} (verify --compare {tol['compare']})" if tol.get("compare")
                                 else f"rtol {tol.get('rtol')}, atol {tol.get('atol')}"))
    options = {k: v for k, v in m.get("options", {}).items() if v not in (None, [], False)}
    print("options: " + ", ".join(f"{k}={v}" for k, v in options.items()))
    if m.get("report_text"):
        print(m["report_text"])


def _table(rows) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


def _bytes(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


# ---------------------------------------------------------------------------------------------- verify


def _verify(args) -> int:
    from .verification import verify
    for module in args.imports:
        import_user_module(module)
    checks = verify(args.path, cuda_graphs=args.cuda_graphs,
                    compare=load_function(args.compare, "FUNCTION") if args.compare else None)
    code = next((c.exit_code for c in checks if c.passed is False), 0)
    if args.json:
        print(json.dumps({"path": str(args.path), "exit_code": code,
                          "checks": [{"check": c.name, "verdict": c.verdict, "detail": c.detail} for c in checks]},
                         indent=1))
    else:
        for c in checks:
            print(f"{c.verdict:<5} {c.name:<12} {c.detail}")
        print("verdict: " + ("all checks passed" if code == 0 else
                             f"FAILED ({next(c.name for c in checks if c.passed is False)}), exit code {code}"))
    return code


# ---------------------------------------------------------------------------------------------- bench


def _bench(args) -> int:
    import torch
    from .deploy import load
    from .package import PackageError
    if args.iters < 1 or args.warmup < 0:
        raise UsageError("--iters must be >= 1 and --warmup >= 0")
    for module in args.imports:
        import_user_module(module)
    try:
        model = load(args.path, cuda_graphs=args.cuda_graphs)
    except PackageError as e:
        print(f"hybrid-trt bench: error: {e} (run 'hybrid-trt verify {args.path}')", file=sys.stderr)
        return e.exit_code
    eager = None
    if args.model:
        from .example_inputs import to_eval
        eager, _ = load_factory(args.model)
        eager = to_eval(eager)
    results = []
    for ref in model.manifest["reference"]:
        data = torch.load(model.package.root / ref["file"], weights_only=True)
        inputs = [t.to(model.device) for t in data["inputs"]]
        row = {"input_shapes": ref["input_shapes"], "package": _time(model, inputs, args)}
        if eager is not None:
            try:
                row["eager"] = _time(eager, model.as_model_inputs(inputs), args)
            except Exception as e:  # a factory for another model: say so, not a traceback
                raise UsageError(f"--model {args.model}: its model does not take the package's reference inputs "
                                 f"{ref['input_shapes']} ({type(e).__name__}: {e}); is it the exported model?") from e
            row["speedup"] = row["eager"]["median_ms"] / row["package"]["median_ms"]
        results.append(row)
    graphs = model.cuda_graphs
    if args.json:
        print(json.dumps(results if graphs is None else {"results": results, "cuda_graphs": dataclasses.asdict(graphs)},
                         indent=1))
        return 0
    if graphs is not None:
        print(f"CUDA graphs: {graphs.status}" + (f" ({'; '.join(graphs.reasons)})" if graphs.reasons else ""))
    header = ("input shapes", "package median ms", "p10", "p90", "p99")
    rows = [header + (("eager median ms", "speedup") if eager is not None else ())]
    for r in results:
        p = r["package"]
        row = ("; ".join("x".join(map(str, s)) for s in r["input_shapes"]), f"{p['median_ms']:.3f}",
               f"{p['p10_ms']:.3f}", f"{p['p90_ms']:.3f}", f"{p['p99_ms']:.3f}")
        if eager is not None:
            row += (f"{r['eager']['median_ms']:.3f}", f"{r['speedup']:.2f}x")
        rows.append(row)
    print(_table(rows))
    if eager is None:
        print("(eager not timed: the package stores nothing of the model's code; pass --model MODULE:FACTORY)")
    return 0


def _time(fn, inputs, args) -> dict:
    import torch
    import torch.utils._pytree as pytree
    leaves = pytree.tree_leaves(inputs)  # (an eager model's arguments may be nested)
    sync = torch.cuda.synchronize if leaves and leaves[0].is_cuda else (lambda: None)
    times = []
    with torch.no_grad():
        for _ in range(args.warmup):
            fn(*inputs)
        sync()
        for _ in range(args.iters):
            t0 = time.perf_counter()
            fn(*inputs)
            sync()
            times.append((time.perf_counter() - t0) * 1e3)
    times.sort()

    def pct(q):
        return times[min(len(times) - 1, int(round(q * (len(times) - 1))))]
    return {"median_ms": statistics.median(times), "p10_ms": pct(0.10), "p90_ms": pct(0.90), "p99_ms": pct(0.99),
            "iters": len(times)}


if __name__ == "__main__":
    sys.exit(main())
