"""The one logger of the package: everything user-visible goes through ``logging.getLogger("hybrid_trt")``."""
import contextlib
import logging

logger = logging.getLogger("hybrid_trt")


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
