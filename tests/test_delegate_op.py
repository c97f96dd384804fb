"""The delegate op's failures reach the caller even through a runner that does not propagate them: torch 2.11's
CUDA AOTInductor runner logged an EngineNotInPackage raised inside the op ("Exception in aoti_torch") and returned
outputs that were never computed (seen on the H200). ``run_surfacing_failures`` (used by hybrid_trt.load's model)
raises it from Python."""
import time

import pytest
import torch

from hybrid_trt.engines.op import run_surfacing_failures

MISSING = "f" * 64  # a content key in no store


def _swallowing_runner(x):
    try:
        torch.ops.hybrid_trt.delegate(MISSING, [x], [])
    except Exception:  # noqa: BLE001 - what that runner did: log, then return its (unwritten) outputs
        pass
    return [torch.empty_like(x)]


def test_a_failure_the_runner_swallowed_is_raised(tmp_path, monkeypatch):
    monkeypatch.setenv("HYBRID_TRT_CACHE_DIR", str(tmp_path))
    with pytest.raises(RuntimeError, match="neither in this process nor in the engine cache"):
        run_surfacing_failures(_swallowing_runner, torch.zeros(2))


def test_outside_the_runner_nothing_is_kept_and_a_clean_call_returns(tmp_path, monkeypatch):
    monkeypatch.setenv("HYBRID_TRT_CACHE_DIR", str(tmp_path))
    _swallowing_runner(torch.zeros(2))  # not armed: the failure is not held (its traceback would pin tensors)
    out = run_surfacing_failures(lambda x: [x + 1], torch.zeros(2))
    assert torch.equal(out[0], torch.ones(2))


class _Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        return torch.relu(self.conv(x)) * 2 + 1


def _key_compiled_into(cache_dir):
    """A model compiled with ``cache_dir`` given as an option (not the environment's): its partition's key."""
    import hybrid_trt
    model, x = _Net().eval(), torch.randn(1, 3, 8, 8)
    with torch.no_grad():
        torch.compile(model, backend="hybrid_trt", options={"cache_dir": str(cache_dir)})(x)
    (part,) = hybrid_trt.last_report().partitions
    return part.key, model, x


def test_a_key_missed_in_this_process_is_loaded_from_the_store_its_compile_used(tmp_path):
    """Inductor's cache may serve a graph calling a key no runtime of this process holds: it is loaded from the
    store a compile of this process used, even where that is a cache_dir option, not the environment's."""
    from hybrid_trt.engines.runtime import REGISTRY, _Registry
    key, model, x = _key_compiled_into(tmp_path / "option_cache")
    registry = _Registry()
    registry.register(REGISTRY.resolve(key))  # what a compile of this process registered
    registry.live.clear(), registry.all.clear()  # ...then released (the compiled code dropped)
    runtime = registry.resolve(key)
    assert runtime.store.root == tmp_path / "option_cache"
    with torch.no_grad():
        (out,) = runtime.run([x], ())
        assert torch.allclose(out, model(x), atol=1e-5)


def test_two_threads_missing_one_key_load_it_once(tmp_path, monkeypatch):
    import threading
    from hybrid_trt.engines import runtime as rt
    key, _model, _x = _key_compiled_into(tmp_path / "option_cache")
    registry = rt._Registry()
    registry.register(rt.REGISTRY.resolve(key))
    registry.live.clear(), registry.all.clear()
    loads, real = [], rt.load_runtime

    def slow_load(*a, **k):
        loads.append(a[0])
        time.sleep(0.2)  # long enough for the other thread to miss too
        return real(*a, **k)
    monkeypatch.setattr(rt, "load_runtime", slow_load)
    got = []
    threads = [threading.Thread(target=lambda: got.append(registry.resolve(key))) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert loads == [key] and len(got) == 2 and got[0] is got[1]
