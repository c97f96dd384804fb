"""The CUDA-graph capture probe runs in a separate process (hybrid_trt/capture_probe.py).

On the CPU these check the plumbing for real: the child process starts, finds the partition's entry (in the engine
store, or in a scratch store holding its recipe when the cache is off), loads or builds the engine and runs it;
and how the parent reads a child that crashed or said nothing. The capture itself runs on a GPU machine
(tests/test_cuda_graphs.py)."""
import pytest
import torch

import hybrid_trt
from hybrid_trt import capture_probe
from hybrid_trt.cudagraphs import ProbeResult
from hybrid_trt.engines.runtime import REGISTRY

CPU_VERDICT = "the engine runs on the CPU (CUDA graphs capture CUDA work only)"


def _compiled_runtime(options):
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.Conv2d(8, 4, 1)).eval()
    x = torch.randn(1, 3, 16, 16)
    with torch.no_grad():
        compiled = torch.compile(model, backend="hybrid_trt", options=options)
        compiled(x)
    [part] = [p for p in hybrid_trt.last_report().partitions if p.status == "delegated"]
    return REGISTRY.resolve(part.key), x, compiled


@pytest.mark.parametrize("cache", [True, False], ids=["engine-store", "cache-off"])
def test_child_process_loads_and_runs_the_engine(tmp_path, cache):
    options = {"cache_dir": str(tmp_path / "store")} if cache else {"cache": False}
    runtime, x, _keep = _compiled_runtime(options)
    metas = [torch.empty(x.shape, device="meta")]
    verdicts = capture_probe.probe_isolated([(runtime, metas, [])])
    # The child's own verdict: it loaded the engine by key (or built it from the recipe) and ran it; any failure
    # on the way would read "probe failed: ..." or "could not be loaded".
    assert verdicts == {runtime.key: ProbeResult(CPU_VERDICT)}
    assert list(runtime.capture_verdicts.values()) == [ProbeResult(CPU_VERDICT)]


def test_a_probe_that_raises_is_a_verdict_and_the_next_partition_is_still_probed(tmp_path):
    # The child's own except branch: a probe that raises gives "probe failed: ..." for that partition (it named a
    # helper that no longer existed, so the child died with AttributeError and every later partition lost its
    # verdict to the process's exit status).
    import json
    import subprocess
    import sys
    options = {"cache_dir": str(tmp_path / "store")}
    (first, x, _keep), (second, _, _keep2) = _compiled_runtime(options), _compiled_runtime(options)
    metas = [torch.empty(x.shape, device="meta")]
    bundle = capture_probe._bundle([(first, metas, [], None), (second, metas, [], None)], str(tmp_path))
    bad, good = bundle["partitions"]
    assert bad["key"] != good["key"]  # two models with their own random weights
    bad["inputs"] = [[list(x.shape), "no_such_dtype"]]
    path = tmp_path / "bundle.json"
    path.write_text(json.dumps(dict(bundle, partitions=[bad, good], time_replay=False)))
    done = subprocess.run([sys.executable, "-m", "hybrid_trt.capture_probe", str(path)], capture_output=True,
                          text=True, timeout=600)
    verdicts = capture_probe.verdicts_from(done.returncode, done.stdout, done.stderr, [bad["key"], good["key"]])
    assert done.returncode == 0, done.stderr[-2000:]
    assert verdicts[bad["key"]].reason.startswith("probe failed: AttributeError"), verdicts[bad["key"]]
    assert "no_such_dtype" in verdicts[bad["key"]].reason
    assert verdicts[good["key"]] == ProbeResult(CPU_VERDICT)


def test_known_verdicts_are_not_probed_again(tmp_path, monkeypatch):
    runtime, x, _keep = _compiled_runtime({"cache_dir": str(tmp_path)})
    metas = [torch.empty(x.shape, device="meta")]
    runtime.capture_verdicts[((tuple(x.shape),), ())] = ProbeResult(None, 0.25)
    monkeypatch.setattr(capture_probe, "_run_child", lambda *a: pytest.fail("probed a known verdict again"))
    assert capture_probe.probe_isolated([(runtime, metas, [])]) == {runtime.key: ProbeResult(None, 0.25)}


def test_a_child_that_crashes_clears_nothing():
    line = capture_probe._MARK + '{"key": "a", "reason": null, "replay_ms": 0.125}'
    clean = capture_probe.verdicts_from(0, line + "\n", "", ["a"])
    assert clean == {"a": ProbeResult(None, 0.125)}  # capture-safe, with the device time of its replay
    aborted = capture_probe.verdicts_from(-6, line + "\n", "noise\nFatal Python error: Aborted\n", ["a", "b"])
    assert aborted["a"] == aborted["b"] and aborted["a"].replay_ms is None
    assert "killed by signal 6" in aborted["a"].reason and "Fatal Python error: Aborted" in aborted["a"].reason
    unsafe = capture_probe._MARK + '{"key": "a", "reason": "host node", "replay_ms": null}'
    assert capture_probe.verdicts_from(1, unsafe, "boom", ["a"])["a"] == ProbeResult("host node")
    assert "no verdict" in capture_probe.verdicts_from(0, "", "", ["a"])["a"].reason
