"""Shared fixtures of the hybrid_trt test suite (CPU only)."""
import logging
import os
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
def _run_local_temporary_files(tmp_path_factory):
    """Temporary files and Inductor's and Triton's caches live in this run's temporary directory, which pytest
    removes when the run passes (tmp_path_retention_policy in pytest.ini) and prunes after a failed one, in this
    process and in the processes the tests start (TMPDIR). Their default places are shared by every run on the
    machine: Inductor's precompiled headers (about 150 MB each, keyed by the compiler command line, which holds
    the checkout's path) and every test's new cache entries grew there until a CI disk was full (ENOSPC)."""
    import tempfile

    from torch._inductor import codecache
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir
    from torch._inductor.utils import clear_caches

    root = tmp_path_factory.mktemp("tmp")
    patch = pytest.MonkeyPatch()
    patch.setenv("TMPDIR", str(root))
    patch.setattr(tempfile, "tempdir", str(root))
    inductor = default_cache_dir()  # under TMPDIR now, as in the test's child processes
    patch.setenv("TORCHINDUCTOR_CACHE_DIR", inductor)
    patch.setenv("TRITON_CACHE_DIR", os.path.join(inductor, "triton"))
    # Computed from the default directory when Inductor was imported (the env variable does not move them).
    headers = os.path.join(inductor, "precompiled_headers")
    patch.setattr(codecache, "_HEADER_DIR", headers, raising=False)
    patch.setattr(codecache, "_HEADER_LOCK_DIR", os.path.join(headers, "locks"), raising=False)
    clear_caches()  # nothing in memory may still point at the old directories
    yield
    patch.undo()


@pytest.fixture(autouse=True)
def _own_engine_cache(tmp_path, monkeypatch):
    """Every test gets an empty engine store, so a test's builds, fallbacks and injected failures are its own (and
    never touch the user's ~/.cache). Inductor's own cache stays shared: hybrid entries there are tied to the
    store's graph manifests (a new store means new cache-key tags), so they cannot cross tests either."""
    monkeypatch.setenv("HYBRID_TRT_CACHE_DIR", str(tmp_path / "hybrid_trt_cache"))


@pytest.fixture(autouse=True)
def _delegate_placement(monkeypatch):
    """Tests are about what a delegate does with the partitions it is given. On a GPU the default placement
    ("auto") times each partition against Inductor and moves those Inductor beats, which can leave nothing
    delegated to test (on the CPU, where CI runs, "auto" delegates anyway). Tests of the default itself remove
    the variable (test_placement.py, test_cuda_graphs.py)."""
    monkeypatch.setenv("HYBRID_TRT_PLACEMENT", "delegate")


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


@pytest.fixture
def no_tf32():
    """TF32 off for the test (GPU comparisons with eager at float32 tolerances)."""
    matmul, cudnn = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = matmul, cudnn


class _StandInGraph:
    def __init__(self, fn, full, outputs):
        self.fn, self.full, self.outputs, self.replays = fn, full, outputs, 0

    def replay(self):
        self.replays += 1
        for o, r in zip(self.outputs, self.fn(*self.full)):
            o.copy_(r)


@pytest.fixture
def stand_in_capture(monkeypatch):
    """The whole runner (whole_graph.py) on the CPU: its capture replaced by a stand-in that runs the callable
    at each replay into the captured outputs; the captures made, in order."""
    from hybrid_trt import whole_graph
    captures = []

    def capture(fn, args, copied, static):
        full = list(args)
        inputs = []
        for i in copied:
            full[i] = args[i].clone()
            inputs.append(full[i])
        outputs = [t.clone() for t in fn(*full)]
        ptrs = [None] * len(args)
        for i in static:
            ptrs[i] = args[i].data_ptr()
        captures.append(_StandInGraph(fn, full, outputs))
        return whole_graph._Captured(captures[-1], inputs, outputs, ptrs, list)
    monkeypatch.setattr(whole_graph, "_capture", capture)
    monkeypatch.setattr(whole_graph, "_CAPTURE_DEVICE", "cpu")
    return captures



_HANG_EXIT_S = float(os.environ.get("TEST_HANG_EXIT_S", "0") or 0)
_hang_log = []


def pytest_configure(config):
    # A process has one faulthandler timer: pytest's own (faulthandler_timeout, dump only) would replace ours.
    if _HANG_EXIT_S and float(config.getini("faulthandler_timeout") or 0) > 0:
        raise pytest.UsageError("TEST_HANG_EXIT_S and faulthandler_timeout both set the one faulthandler timer; "
                                "drop faulthandler_timeout")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """With TEST_HANG_EXIT_S set (the GPU lanes), a test still running after that many seconds has every thread's
    stack appended to TEST_HANG_LOG (xdist workers' stderr reaches nobody; one file for all workers, as the device
    returns only so many files) and its process ended: under xdist the run reports that test as crashed and goes on,
    so a hung test names itself instead of holding the run until its time limit (a GPU run lost its summary that
    way)."""
    if not _HANG_EXIT_S:
        yield
        return
    import faulthandler
    if not _hang_log:
        base = os.environ.get("TEST_HANG_LOG")
        _hang_log.append(open(base, "a") if base else sys.stderr)
    log = _hang_log[0]
    faulthandler.dump_traceback_later(_HANG_EXIT_S, exit=True, file=log)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()
