"""Shared fixtures of the hybrid_trt test suite (CPU only)."""
import logging
import pathlib
import sys

import pytest
import torch

# Importable from a plain checkout too (CI installs the package editable; this keeps `pytest tests` working
# without the install).
_ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

import hybrid_trt  # noqa: E402,F401  (registers the backend)

# Keep CPU thread counts small and deterministic on the 2-core CI machine.
torch.set_num_threads(min(2, torch.get_num_threads()))


@pytest.fixture(autouse=True, scope="session")
def _run_local_compiler_caches(tmp_path_factory):
    """Inductor's and Triton's caches live in this run's temporary directory, which pytest removes when the run
    passes (tmp_path_retention_policy in pytest.ini) and prunes after a failed one. Their default places are
    shared by every run on the machine, and every test's new engine store means new Inductor entries: on a CI
    machine that keeps /tmp between runs they grew until the disk was full and the suite failed with ENOSPC."""
    from torch._inductor.utils import clear_caches

    root = tmp_path_factory.mktemp("compiler_caches")
    patch = pytest.MonkeyPatch()
    patch.setenv("TORCHINDUCTOR_CACHE_DIR", str(root / "inductor"))
    patch.setenv("TRITON_CACHE_DIR", str(root / "triton"))
    clear_caches()  # nothing in memory may still point at the old directory
    yield
    patch.undo()


@pytest.fixture(autouse=True)
def _own_engine_cache(tmp_path, monkeypatch):
    """Every test gets an empty engine store, so a test's builds, fallbacks and injected failures are its own (and
    never touch the user's ~/.cache). Inductor's own cache stays shared: hybrid entries there are tied to the
    store's graph manifests (a new store means new cache-key tags), so they cannot cross tests either."""
    monkeypatch.setenv("HYBRID_TRT_CACHE_DIR", str(tmp_path / "hybrid_trt_cache"))


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    """Every test starts (and leaves) with an empty Dynamo cache, so compile counts and reports are its own."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.fixture
def hybrid_logs(caplog):
    """caplog capturing the package logger at WARNING and above."""
    caplog.set_level(logging.WARNING, logger="hybrid_trt")
    return caplog
