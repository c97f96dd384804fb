"""PyTorch's own OpInfo samples for every ATen op that has a lowering, run through the hybrid_trt delegate.

    .venv/bin/python benchmarks/opinfo_conformance.py [--all | --per-op N] [--ops NAME,...] [--out FILE]

Which OpInfos: those of ``op_db`` whose first CPU float32 sample, captured the way the backend captures (ATen,
functional, Inductor's decompositions minus every op with a lowering), reaches a target of the lowering
registry. Each sample of those (float32, and the int/bool dtypes the op supports) is captured the same way and
sent through the backend's compile-time path: its capability check and partitioner (``partition_graph`` with
the onnxruntime delegate, ``min_block_size=1``, so every node the check accepts is delegated), then per partition
``lower_partition``, the delegate's engine build and a first call on the sample's real values. Each partition's
outputs are compared with the values eager ATen computes for the same nodes (Dynamo, stitching and Inductor's
code generation are skipped: they would only cost time; tests/test_opinfo_conformance.py also runs the known
cases through ``torch.compile``).

Each sample ends as one of
- ``matched``: outputs equal eager (within float tolerance), at least one node delegated;
- ``declined``: every registered node was declined by the capability check at compile time (reasons kept);
- ``failed``: a partition's lowering, engine build or first call raised (the backend would fall back: the
  capability check accepted what the delegate rejects), or its outputs differ from eager;
- ``skipped``: the sample cannot be compared (nondeterministic op, not traceable, or reaches no registered op).

``--all`` runs every sample and writes a summary table to ``benchmarks/results/opinfo_conformance_cpu.md``;
tests/test_opinfo_conformance.py runs a capped number of samples per OpInfo in CI.
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import dataclasses
import operator
import os
import platform
import subprocess
import sys
import time
import warnings
from typing import Iterable, Optional

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import torch  # noqa: E402
import torch.fx as fx  # noqa: E402
from torch.utils import _pytree as pytree  # noqa: E402

import hybrid_trt  # noqa: E402,F401  (registers the backend and the lowerings)
from hybrid_trt.lowerings import registered_targets  # noqa: E402

# Integer and bool dtypes tried besides float32 (each only where the OpInfo supports it on CPU); float64 is
# checked per lowering by tests/test_lowerings.py.
EXTRA_DTYPES = (torch.int64, torch.int32, torch.bool)
RTOL = ATOL = 1e-4  # ONNX Runtime and ATen accumulate float32 in different orders
# Ops whose result is undefined (uninitialised memory) or random: eager is no reference for them.
_UNDEFINED_OUTPUT_OPS = ("empty", "new_empty", "empty_like", "empty_strided", "new_empty_strided",
                         "empty_permuted")


@dataclasses.dataclass
class SampleResult:
    op: str  # OpInfo name (with variant)
    dtype: str
    index: int  # sample number within (op, dtype)
    status: str  # matched | declined | failed | skipped
    detail: str = ""  # failure message, skip reason
    declined: tuple = ()  # capability-check reasons of the registered nodes left to Inductor
    delegated_ops: int = 0
    has_nan: bool = False  # a float input holds NaN (ONNX Runtime's ArgMax/ReduceMax skip it; ATen propagates)
    description: str = ""  # the sample's shapes and arguments, to reproduce it

    def line(self) -> str:
        return f"{self.op} [{self.dtype} #{self.index}] {self.status}: {self.detail} :: {self.description}"


def op_db():
    from torch.testing._internal.common_methods_invocations import op_db as db
    return db


def opinfo_name(op) -> str:
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


# -- capture (as the backend does) ---------------------------------------------------------------------------------
def _sample_callable(op, sample):
    """(fn(*tensors) -> list of output tensors, tensors): every tensor leaf of the sample becomes a graph input."""
    leaves, spec = pytree.tree_flatten((sample.input, sample.args, sample.kwargs))
    positions = [i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)]
    tensors = [leaves[i] for i in positions]

    def fn(*ts):
        filled = list(leaves)
        for i, t in zip(positions, ts):
            filled[i] = t
        inp, args, kwargs = pytree.tree_unflatten(filled, spec)
        out = op(inp, *args, **kwargs)
        return [o for o in pytree.tree_leaves(out) if isinstance(o, torch.Tensor)]
    return fn, tensors


def capture(fn, tensors) -> fx.GraphModule:
    """The functional ATen graph AOTAutograd hands the backend: traced by AOTAutograd itself (inference, no joint
    graph) with the backend's table, Inductor's decompositions minus every op that has a lowering
    (``hybrid_trt.capture.capture_decompositions``). Inputs the op mutates become extra graph outputs."""
    from torch._functorch.aot_autograd import aot_export_module

    class Sample(torch.nn.Module):
        def forward(self, *ts):
            return tuple(fn(*ts))
    with torch.no_grad():
        gm, _signature = aot_export_module(Sample(), list(tensors), trace_joint=False,
                                           decompositions=_decompositions())
    return gm


_DECOMPS = None


def _decompositions():
    global _DECOMPS
    if _DECOMPS is None:
        from hybrid_trt.capture import capture_decompositions
        _DECOMPS = capture_decompositions()
    return _DECOMPS


def _call_targets(gm: fx.GraphModule) -> set:
    return {n.target for n in gm.graph.nodes if n.op == "call_function"}


def select_opinfos(names: Optional[Iterable[str]] = None) -> list:
    """OpInfos of op_db with CPU float32 samples (all, or those named); ``run_opinfo`` drops the ones whose first
    sample reaches no registered op."""
    wanted = set(names) if names else None
    return [op for op in op_db() if (wanted is None or opinfo_name(op) in wanted or op.name in wanted)
            and torch.float32 in op.supported_dtypes("cpu")]


# -- running one sample through the backend -------------------------------------------------------------------------
@contextlib.contextmanager
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def _describe(sample) -> str:
    def one(x):
        if isinstance(x, torch.Tensor):
            return f"{str(x.dtype).replace('torch.', '')}{list(x.shape)}"
        return repr(x)
    parts = [one(sample.input)] + [one(a) for a in sample.args] + [f"{k}={one(v)}" for k, v in sample.kwargs.items()]
    text = ", ".join(pytree.tree_map(one, p) if not isinstance(p, str) else p for p in parts)
    return text if len(text) <= 300 else text[:297] + "..."


def _is_undefined(gm: fx.GraphModule) -> bool:
    for t in _call_targets(gm):
        if isinstance(t, torch._ops.OpOverload):
            if torch.Tag.nondeterministic_seeded in t.tags or t._schema.name.split("::")[-1] in _UNDEFINED_OUTPUT_OPS:
                return True
    return False


def _compare(actual, expected, tie_tolerant: Optional[dict] = None) -> Optional[str]:
    if len(actual) != len(expected):
        return f"{len(actual)} outputs, eager has {len(expected)}"
    for i, (a, e) in enumerate(zip(actual, expected)):
        if not isinstance(a, torch.Tensor) or not isinstance(e, torch.Tensor):
            return f"output {i}: {type(a).__name__} vs eager {type(e).__name__}"
        if a.dtype != e.dtype or a.shape != e.shape:
            return f"output {i}: {a.dtype}{list(a.shape)} vs eager {e.dtype}{list(e.shape)}"
        if tie_tolerant and i in tie_tolerant:
            # Ties may be broken differently: the delegate's indices must select the same values eager selected.
            a, e = tie_tolerant[i](a), tie_tolerant[i](e)
        try:
            torch.testing.assert_close(a, e, rtol=RTOL, atol=ATOL, equal_nan=True)
        except AssertionError as err:
            return f"output {i} differs from eager: {' '.join(str(err).split())[:300]}"
    return None


def run_sample(op, sample, dtype, index: int) -> SampleResult:
    name, dname = opinfo_name(op), str(dtype).replace("torch.", "")
    result = SampleResult(name, dname, index, "skipped", description=_describe(sample))
    fn, tensors = _sample_callable(op, sample)
    if any(t.layout != torch.strided for t in tensors):
        result.detail = "sparse input (delegates take dense tensors)"
        return result
    result.has_nan = any(t.is_floating_point() and bool(t.isnan().any()) for t in tensors)
    with _quiet():
        try:
            gm = capture(fn, tensors)
        except Exception as e:  # noqa: BLE001 - Dynamo would graph-break or fail on the same sample in eager
            result.detail = f"not traceable: {type(e).__name__}"
            return result
        if sum(n.op == "placeholder" for n in gm.graph.nodes) != len(tensors):
            result.detail = "the graph lifts a tensor constant to an input"
            return result
        if not any(n.op == "call_function" and n.target in registered_targets() for n in gm.graph.nodes):
            result.detail = "reaches no registered op"
            return result
        if _is_undefined(gm):
            result.detail = "random or uninitialised output"
            return result
        with torch.no_grad():
            try:
                repeat = _compare(fn(*_copies(tensors)), fn(*_copies(tensors)))
            except Exception as e:  # noqa: BLE001 - e.g. as_strided reading storage beyond its input's elements
                result.detail = f"eager fails on copies of its inputs: {type(e).__name__}"
                return result
            if repeat is not None:
                result.detail = "eager is not deterministic"
                return result
            try:
                _delegate_graph(gm, tensors, result)
            except Exception as e:  # noqa: BLE001 - every exception is a failure, reported with its message
                result.status, result.detail = "failed", f"raised {type(e).__name__}: {_one_line(e)}"
    return result


def _one_line(e, limit=300) -> str:
    return " ".join(str(e).split())[:limit]


def _delegate_graph(gm: fx.GraphModule, tensors, result: SampleResult) -> None:
    """The backend's compile-time path on ``gm``: its capability check and partitioner (min_block_size=1), then per
    partition the lowering, the delegate's engine build and a first call on the sample's real values, each
    partition's outputs compared with the values eager ATen computes for the same nodes."""
    from hybrid_trt.delegates import get_delegate
    from hybrid_trt.lowerings.to_onnx import lower_partition
    from hybrid_trt.options import make_options
    from hybrid_trt.partitioner import partition_graph
    from hybrid_trt.partitioner.capability import NodeKind, classify, op_name
    from hybrid_trt.partitioner.extract import extract

    delegate = get_delegate("onnxruntime")
    opts = make_options({"min_block_size": 1, "delegates": ["onnxruntime"], "num_threads": 1})
    constants = {n: getattr(gm, n.target) for n in gm.graph.nodes if n.op == "get_attr"}
    plan = partition_graph(gm.graph, [delegate], 1, frozenset(), frozenset(constants))
    registered = {n for n in gm.graph.nodes if n.op == "call_function" and n.target in registered_targets()
                  and classify(n) is NodeKind.OP}
    result.declined = tuple(sorted({f"{op_name(n)}: {why}" for n, why in plan.inductor_reasons.items()
                                    if n in registered}))
    result.delegated_ops = sum(p.op_count for p in plan.partitions)
    if not plan.partitions:
        result.status, result.detail = "declined", "; ".join(result.declined)
        return
    values = _eager_values(gm, tensors)
    for k, part in enumerate(plan.partitions):
        ex = extract(part, constants)
        inputs = [values[n] for n in ex.tensor_inputs]
        sizes = [values[n] for n in ex.size_inputs]
        stage = "lowering"
        try:
            options = _delegate_options(delegate, opts)
            # Lowered for what runs it, as the runtime does (the CPU provider gets its own max-pool form)
            model, metas = lower_partition(ex.module, [tuple(t.shape) for t in inputs], [t.dtype for t in inputs],
                                           sizes, target=delegate.lowering_target(torch.device("cpu"), options))
            stage = "build"
            engine = delegate.build(model, metas, torch.device("cpu"), options)
            stage = "first call"
            outs = engine(inputs)
        except Exception as e:  # noqa: BLE001 - the backend would fall back here: the check accepted too much
            ops = ", ".join(sorted({op_name(n) for n in part.nodes if classify(n) is NodeKind.OP}))
            result.status, result.detail = "failed", f"partition {k} ({ops}) falls back at {stage}: {_one_line(e)}"
            return
        mismatch = _compare(list(outs), [values[n] for n in ex.outputs], _tie_tolerant(ex, values))
        if mismatch is not None:
            ops = ", ".join(sorted({op_name(n) for n in part.nodes if classify(n) is NodeKind.OP}))
            result.status, result.detail = "failed", f"partition {k} ({ops}): {mismatch}"
            return
    result.status = "matched"


def _delegate_options(delegate, opts):
    # The delegate's own view of the options (engine settings), where it defines one.
    return delegate.options_from(opts) if hasattr(delegate, "options_from") else opts


def _copies(tensors):
    # Some ops write to their inputs (e.g. batch norm's running statistics): each run gets its own copies.
    return [t.clone() for t in tensors]


def _eager_values(gm: fx.GraphModule, tensors) -> dict:
    """Every node's value when eager ATen runs the graph (snapshots, in case a later op writes to one)."""
    values = {}

    class Record(fx.Interpreter):
        def run_node(self, n):
            out = super().run_node(n)
            values[n] = pytree.tree_map(lambda v: v.clone() if isinstance(v, torch.Tensor) else v, out)
            return out
    Record(gm).run(*_copies(tensors))
    return values


def _tie_tolerant(ex, values) -> dict:
    """Outputs holding the indices of a top-k, whose order among equal values is unspecified (ATen and ONNX
    Runtime may pick different ones): output position -> indices -> the input values they select."""
    out = {}
    for i, node in enumerate(ex.outputs):
        src = node.args[0] if node.target is operator.getitem else None
        if getattr(src, "target", None) is torch.ops.aten.topk.default and node.args[1] == 1:
            x = values[src.args[0]]
            dim = src.args[2] if len(src.args) > 2 else src.kwargs.get("dim", -1)
            out[i] = (lambda idx, x=x, dim=dim: x.gather(dim, idx)) if x.dim() else (lambda idx, x=x: x)
    return out


def _features(sample) -> dict:
    """What makes a sample different from another, with a weight: tensor ranks, 0-d and zero-size tensors (what
    a capability check most often misses) weigh more than other argument values."""
    out = {}

    def add(where, value):
        tensors = [t for t in pytree.tree_leaves(value) if isinstance(t, torch.Tensor)]
        for t in tensors:
            out[f"{where}:rank{t.dim()}"] = 10
            if t.dim() == 0:
                out["0-d"] = 10
            if t.numel() == 0:
                out["zero-size"] = 10
        if not tensors:
            out[f"{where}={value!r}"[:60]] = 1
    for i, arg in enumerate((sample.input,) + tuple(sample.args)):
        add(i, arg)
    for k, v in sample.kwargs.items():
        add(k, v)
    return out


def pick_samples(op, dtype, limit: Optional[int]) -> list:
    """(index, sample) pairs: all of them without a limit; else the first one, then greedily the ones that add the
    most weight of features not seen yet (0-d, zero-size, other ranks, other arguments), so a few samples reach
    the edge cases a capability check has to decline."""
    # Seeded once, not before each sample as OpInfo does by default (set_seed): the same samples at every run, and
    # that per-sample reseeding was a fifth of the CI OpInfo fixture's time
    torch.manual_seed(0)
    try:
        samples = list(op.sample_inputs("cpu", dtype, set_seed=False))
    except Exception:  # noqa: BLE001 - a broken sample generator gives no samples
        return []
    if limit is None or len(samples) <= limit:
        return list(enumerate(samples))
    feats = [_features(x) for x in samples]
    chosen, seen = [0], set(feats[0])
    while len(chosen) < limit:
        gain, k = max((sum(w for f, w in feats[i].items() if f not in seen), -i)
                      for i in range(len(samples)) if i not in chosen)
        if gain == 0:
            break
        chosen.append(-k)
        seen |= set(feats[-k])
    return [(i, samples[i]) for i in sorted(chosen)]


def run_opinfo(op, per_dtype_limit: Optional[int], dtypes=(torch.float32,) + EXTRA_DTYPES) -> list[SampleResult]:
    """Every picked sample of ``op``; empty when its first float32 sample reaches no registered op (the OpInfo
    tests nothing hybrid_trt lowers)."""
    results = []
    supported = op.supported_dtypes("cpu")
    if torch.float32 not in supported:
        return results
    for dtype in dtypes:
        if dtype not in supported:
            continue
        limit = per_dtype_limit if dtype is torch.float32 or per_dtype_limit is None else \
            max(1, per_dtype_limit // 2)
        for k, sample in pick_samples(op, dtype, limit):
            r = run_sample(op, sample, dtype, k)
            if not results and r.status == "skipped" and (r.detail == "reaches no registered op"
                                                           or r.detail.startswith("not traceable")):
                return []
            results.append(r)
    return results


# -- script mode ---------------------------------------------------------------------------------------------------
def summarise(results: list[SampleResult]) -> str:
    by_op = collections.OrderedDict()
    for r in results:
        by_op.setdefault(r.op, []).append(r)
    counts = collections.Counter(r.status for r in results)
    lines = [f"| OpInfo | samples | matched | declined | failed | skipped | decline reasons |",
             "|---|---|---|---|---|---|---|"]
    for name, rs in by_op.items():
        c = collections.Counter(r.status for r in rs)
        reasons = collections.Counter(d for r in rs if r.status in ("declined", "matched") for d in r.declined)
        text = "; ".join(f"{why} (x{n})" for why, n in reasons.most_common(4))
        lines.append(f"| {name} | {len(rs)} | {c['matched']} | {c['declined']} | {c['failed']} | {c['skipped']} | "
                     f"{text.replace('|', '/')} |")
    head = (f"OpInfos: {len(by_op)}, samples: {len(results)}, matched: {counts['matched']}, declined: "
            f"{counts['declined']}, failed: {counts['failed']}, skipped: {counts['skipped']}")
    return head + "\n\n" + "\n".join(lines)


def _machine() -> str:
    import onnxruntime
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--", "hybrid_trt"], capture_output=True,
                           text=True).stdout.strip()
    return (f"machine: {platform.machine()}, {os.cpu_count()} CPU cores ({platform.processor() or 'cpu'}), "
            f"torch {torch.__version__}, onnxruntime {onnxruntime.__version__}, commit {commit}"
            f"{' (hybrid_trt/ modified)' if dirty else ''}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--all", action="store_true", help="every sample of every selected OpInfo")
    parser.add_argument("--per-op", type=int, default=4, help="float32 samples per OpInfo without --all")
    parser.add_argument("--ops", default="", help="comma-separated OpInfo names (default: every one selected)")
    parser.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results", "opinfo_conformance_cpu.md"))
    args = parser.parse_args(argv)
    torch.set_num_threads(2)
    t0 = time.perf_counter()
    ops = select_opinfos([s for s in args.ops.split(",") if s] or None)
    results = []
    for op in ops:
        rs = run_opinfo(op, None if args.all else args.per_op)
        results += rs
        for r in rs:
            if r.status == "failed":
                print("FAILED", r.line(), flush=True)
    elapsed = time.perf_counter() - t0
    table = summarise(results)
    failures = "\n".join(f"- {r.line()}" for r in results if r.status == "failed") or "none"
    text = (f"# OpInfo conformance (ONNX Runtime delegate, CPU)\n\n{_machine()}\n\n"
            f"`benchmarks/opinfo_conformance.py {' '.join(argv if argv is not None else sys.argv[1:])}`, "
            f"{elapsed:.0f} s. Samples: float32 and the int64/int32/bool dtypes each OpInfo supports"
            f"{'' if args.all else f', at most {args.per_op} float32 per OpInfo'}.\n\n{table}\n\n"
            f"## Failures\n\n{failures}\n")
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(text)
    print(table.split("\n")[0])
    print(f"wrote {args.out}")
    return 1 if any(r.status == "failed" for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
