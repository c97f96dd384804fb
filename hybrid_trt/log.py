"""The one logger of the package: everything user-visible goes through ``logging.getLogger("hybrid_trt")``."""
import contextlib
import logging

logger = logging.getLogger("hybrid_trt")

# torch's C++ builder (imported by Inductor's CPU code generation and by AOTInductor) warns once, at import, on a
# machine with CUDA_HOME but no CUDA runtime: "No CUDA runtime is found, using CUDA_HOME=...". True of the
# machine, nothing about the model: kept off the terminal while hybrid_trt compiles.
TORCH_CPP_BUILDER = "torch.utils.cpp_extension"


@contextlib.contextmanager
def quiet(*names: str, level: int = logging.ERROR):
    """Other libraries' loggers ``names`` show only ``level`` and above while the block runs (then as before)."""
    loggers = [logging.getLogger(n) for n in names]
    before = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(max(level, lg.getEffectiveLevel()))
    try:
        yield
    finally:
        for lg, lvl in zip(loggers, before):
            lg.setLevel(lvl)
