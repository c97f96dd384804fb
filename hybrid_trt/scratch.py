"""Inductor's files for a compile with caching off (``cache=False``), removed when the process exits.

With ``force_disable_caches`` Inductor compiles each graph into a fresh ``tempfile.mkdtemp()`` directory under its
cache directory (``TORCHINDUCTOR_CACHE_DIR``, else ``/tmp/torchinductor_<user>``) and never removes it: torch's
``with_fresh_cache_if_config`` (``torch/_inductor/compile_fx.py``) passes ``delete=False``, since the compiled
code is loaded from there. So every process left one ``tmpXXXXXXXX`` directory per graph behind (about 360 KB of
C++ sources and shared objects for a small model). Here the compile runs with ``TORCHINDUCTOR_CACHE_DIR``
pointing at a directory of our own, made in that same cache directory: Inductor's fresh directories land inside
it, and it is removed when the process exits. The variable is restored when the compile returns.
"""
from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import tempfile
import threading
from typing import Iterator

from .log import logger

_VAR = "TORCHINDUCTOR_CACHE_DIR"
PREFIX = "hybrid_trt-nocache-"


# The variable is process-wide, and a graph's backward is compiled at its first backward call, on CUDA in autograd's
# device thread: two unordered swaps could leave it pointing at a scratch directory for good (and later cached
# compiles would write there, to be removed at exit). So swaps hold one lock, and each process makes one scratch
# directory per parent directory (made by this pid: a forked child makes its own).
_swap_lock = threading.RLock()
_made: dict = {}  # (pid, parent directory) -> scratch directory


@contextlib.contextmanager
def inductor_files_removed_at_exit() -> Iterator[None]:
    """Inductor's files written meanwhile go into a directory removed at exit (see the module docstring)."""
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    with _swap_lock:
        parent = cache_dir()  # the user's TORCHINDUCTOR_CACHE_DIR or torch's default (which torch sets there)
        if os.path.basename(parent).startswith(PREFIX):  # nested: already in one
            yield
            return
        path = _made.get((os.getpid(), parent)) or _make(parent)
        if path is None:
            yield
            return
        previous = os.environ[_VAR]
        os.environ[_VAR] = path
        try:
            yield
        finally:
            os.environ[_VAR] = previous


def _make(parent: str):
    try:
        path = tempfile.mkdtemp(prefix=PREFIX, dir=parent)
    except OSError as e:  # Inductor's own mkdtemp there fails too, and reports it
        logger.debug("hybrid_trt: no scratch directory for Inductor under %s (%s)", parent, e)
        return None
    # Registered before use, so a compile that raises is cleaned up too. Only by this process: a child forked
    # later (that exits through sys.exit) inherits the handler while this process still uses the directory.
    atexit.register(_remove, path, os.getpid())
    _made[(os.getpid(), parent)] = path
    return path


def _remove(path: str, owner: int) -> None:
    if os.getpid() == owner:
        shutil.rmtree(path, ignore_errors=True)
