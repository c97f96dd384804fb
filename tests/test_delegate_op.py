"""The delegate op's failures reach the caller even through a runner that does not propagate them: torch 2.11's
CUDA AOTInductor runner logged an EngineNotInPackage raised inside the op ("Exception in aoti_torch") and returned
outputs that were never computed (seen on the H200). ``run_surfacing_failures`` (used by hybrid_trt.load's model)
raises it from Python."""
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
