"""Whether a delegated partition's engine can be captured in a CUDA graph, decided in a separate process.

Capturing a foreign runtime's work is the one step of hybrid_trt that can break a process beyond repair: when a
capture of an ONNX Runtime run fails half-way (a synchronous copy or an allocation during capture), the
provider's bookkeeping is left inconsistent and the process was seen to abort later, at teardown (H200, three
test workers after the detector model). So the capture is tried where a failure costs nothing: a child process
loads the same engine from the engine store by its content key, runs it, captures one run, inspects the captured
nodes (``cudagraphs._probe``), replays it on new data and compares with an uncaptured run, for measured placement
also times its replays (what placement compares Inductor with), then exits normally.
A partition is cleared only when all of that succeeded *and* the child exited cleanly; anything else keeps it
outside CUDA graphs, with the child's reason in the report.

Cost: one child per compiled graph with CUDA graphs on (a Python start with torch and the delegate's runtime,
a few seconds); verdicts are kept per runtime and shape in the process, so recompiling does not probe again.

The child runs as ``python -m hybrid_trt.capture_probe <bundle.json>`` and prints one JSON line per partition.
"""
from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
from typing import Sequence

import torch

from .log import error_text, logger

_TIMEOUT_S = 600  # engine builds (TensorRT) may take minutes when the probe has to build the engine itself
_MARK = "hybrid_trt-capture-verdict "


def probe_isolated(items: Sequence[tuple], time_replay: bool = False) -> dict:
    """``items``: (runtime, input metas, size values) per partition. Returns key -> ``cudagraphs.ProbeResult``
    (``time_replay``: with the replay times of the engines cleared).

    Runtimes whose verdict for these shapes is known in this process are not probed again."""
    verdicts: dict = {}
    todo = []
    for runtime, metas, sizes in items:
        signature = (tuple(tuple(int(s) for s in m.shape) for m in metas), tuple(int(s) for s in sizes))
        known = runtime.capture_verdicts.get(signature, _UNKNOWN)
        if known is _UNKNOWN:
            todo.append((runtime, metas, sizes, signature))
        else:
            verdicts[runtime.key] = known
    if not todo:
        return verdicts
    with tempfile.TemporaryDirectory(prefix="hybrid_trt_probe_") as tmp:
        bundle = dict(_bundle(todo, tmp), time_replay=time_replay)
        path = os.path.join(tmp, "bundle.json")
        with open(path, "w") as f:
            json.dump(bundle, f)
        found = _run_child(path, [rt.key for rt, *_ in todo])
    for runtime, _metas, _sizes, signature in todo:
        runtime.capture_verdicts[signature] = verdicts[runtime.key] = found[runtime.key]
    return verdicts


class _Unknown:
    pass


_UNKNOWN = _Unknown()


def _bundle(todo, tmp: str) -> dict:
    """What the child needs: a store holding each partition's entry (the real engine store when it has the
    entry, else a temporary one holding the partition's recipe, from which the child builds), and the shapes."""
    from .engines.key import environment
    from .engines.runtime import RECIPE, summary_meta
    from .engines.store import EngineStore
    partitions = []
    scratch = None
    for runtime, metas, sizes, _signature in todo:
        root = runtime.store.root
        entry = runtime.store.get(runtime.key, lazy=True) if root is not None else None
        if entry is not None and hasattr(entry.files, "close"):
            entry.files.close()  # only its presence matters here; the child opens it itself
        if entry is None:
            if scratch is None:
                scratch = EngineStore(os.path.join(tmp, "store"))
            env = environment(runtime.delegate.name, runtime.device)
            meta = runtime._entry_meta(env, {"kind": "symbolic", "device": str(runtime.device),
                                             "summary": summary_meta(runtime.report)})
            scratch.put(runtime.key, {RECIPE: runtime.recipe_bytes()}, meta)
            root = scratch.root
        partitions.append({
            "key": runtime.key, "name": runtime.name, "store": str(root), "device": str(runtime.device),
            "inputs": [[list(int(s) for s in m.shape), str(m.dtype).removeprefix("torch.")] for m in metas],
            "sizes": [int(s) for s in sizes],
        })
    return {"partitions": partitions}


def _run_child(bundle_path: str, keys: list) -> dict:
    from .cudagraphs import ProbeResult
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    try:
        done = subprocess.run([sys.executable, "-m", "hybrid_trt.capture_probe", bundle_path], env=env,
                              capture_output=True, text=True, timeout=_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return {k: ProbeResult(f"the capture probe process did not finish within {_TIMEOUT_S} s") for k in keys}
    except OSError as e:
        return {k: ProbeResult(f"the capture probe process could not start: {e}") for k in keys}
    return verdicts_from(done.returncode, done.stdout, done.stderr, keys)


def verdicts_from(returncode: int, stdout: str, stderr: str, keys: list) -> dict:
    """The child's verdicts (key -> ``ProbeResult``), trusted only from a child that exited cleanly: a crash or
    abort at exit means that what it captured leaves a process broken, so every partition it cleared stays
    outside CUDA graphs."""
    from .cudagraphs import ProbeResult
    printed: dict = {}
    for line in stdout.splitlines():
        if line.startswith(_MARK):
            item = json.loads(line[len(_MARK):])
            replay = item.get("replay_ms")
            printed[item["key"]] = ProbeResult(item["reason"], None if replay is None else float(replay))
    if returncode != 0:
        how = f"was killed by signal {-returncode}" if returncode < 0 else f"exited with status {returncode}"
        tail = [ln for ln in stderr.strip().splitlines() if ln.strip()][-1:] or ["no message"]
        why = f"the capture probe process {how} ({tail[0].strip()[:200]})"
        logger.debug("hybrid_trt: capture probe stderr:\n%s", stderr[-4000:])
        return {k: printed[k] if k in printed and printed[k].reason else ProbeResult(why) for k in keys}
    return {k: printed.get(k) or ProbeResult("the capture probe process gave no verdict") for k in keys}


# ---------------------------------------------------------------------------------------------- the child


def _inputs(specs: list, device: torch.device) -> list:
    """Random floating-point data (never zeros: they hide unwritten outputs); integer and boolean inputs are
    zeros, which are valid indices whatever the partition gathers with them."""
    out = []
    for shape, dtype_name in specs:
        dtype = getattr(torch, dtype_name)
        if dtype.is_floating_point or dtype.is_complex:
            out.append(torch.randn(shape, device=device).to(dtype))
        else:
            out.append(torch.zeros(shape, dtype=dtype, device=device))
    return out


def _child(bundle_path: str) -> int:
    from . import cudagraphs
    from .engines.runtime import Policy, load_runtime
    from .engines.store import EngineStore
    with open(bundle_path) as f:
        bundle = json.load(f)
    for part in bundle["partitions"]:
        device = torch.device(part["device"])
        try:
            runtime = load_runtime(part["key"], EngineStore(part["store"]), device, Policy(strict=True),
                                   name=part["name"])
            if runtime is None:
                found = cudagraphs.ProbeResult("its engine could not be loaded from the engine store in the probe "
                                               "process")
            else:
                with torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext():
                    found = cudagraphs._probe(runtime, _inputs(part["inputs"], device), part["sizes"],
                                              bool(bundle.get("time_replay")))
        except Exception as e:  # noqa: BLE001 - any failure is a reason to stay outside graphs
            found = cudagraphs.ProbeResult(f"probe failed: {error_text(e)}")
        print(_MARK + json.dumps({"key": part["key"], "reason": found.reason, "replay_ms": found.replay_ms}),
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1]))
