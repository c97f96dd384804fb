"""The one logger of the package: everything user-visible goes through ``logging.getLogger("hybrid_trt")``,
except what the user asked to have printed (the ``print_report`` option prints each graph's report to stdout)."""
import contextlib
import logging
import threading
import time
import warnings

logger = logging.getLogger("hybrid_trt")

# torch's C++ builder (imported by Inductor's CPU code generation and by AOTInductor) warns once, at import, on a
# machine with CUDA_HOME but no CUDA runtime: "No CUDA runtime is found, using CUDA_HOME=...". True of the
# machine, nothing about the model: kept off the terminal while hybrid_trt compiles.
TORCH_CPP_BUILDER = "torch.utils.cpp_extension"
# torch.export's shape solver warns of inequalities it cannot solve ("The inequality ... cannot be solved using
# solve_univariate_inequality") on the way to its own error or success: kept off the terminal while it captures.
SYMBOLIC_SHAPES = "torch.fx.experimental.symbolic_shapes"


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


# torch's notices about its own internals, which the user cannot act on, each matched narrowly:
# - torch 2.11's pytree deprecates LeafSpec and warns when torch.export's programs are copied: "FutureWarning:
#   `isinstance(treespec, LeafSpec)` is deprecated, use ..." (every export on the GPU machine, session 32);
# - non-strict torch.export warns that "The tensor attributes self.lstm._flat_weights[0], ... were assigned during
#   export" for every nn.LSTM/GRU/RNN (torch's RNN modules reassign their flat weight list in forward; session
#   37). Only a message naming RNN flat weights alone is dropped: a model's own attribute assigned in forward is
#   named and shows.
_TORCH_NOISE = ((r"`?isinstance\(treespec, LeafSpec\)` is deprecated", FutureWarning),
                (r"The tensor attributes (?:[\w.\[\]]+\._flat_weights\[\d+\](?:, )?)+ were assigned during export",
                 UserWarning))


def ignore_torch_noise() -> None:
    """Filters for torch's notices about its own internals (above), installed once when export's module is
    imported: one narrow filter per message for the process (a ``catch_warnings`` block around each export would
    not be thread-safe, and would drop filters other threads add meanwhile)."""
    for message, category in _TORCH_NOISE:
        warnings.filterwarnings("ignore", message=message, category=category)


def first_line(text: str) -> str:
    """The first non-blank line of a message, at most 300 characters (a report or log line names the error)."""
    return text.strip().splitlines()[0][:300] if text.strip() else text


def error_text(e: BaseException) -> str:
    """``Type: first line of the message``, at most 300 characters."""
    return f"{type(e).__name__}: {first_line(str(e))}"[:300]


# Long work that is ours (an engine build: TensorRT's take minutes) says it is still running, at the default log
# level, once it has run this long and then at this interval; shorter work says nothing (INFO shows every build).
SLOW_NOTICE_AFTER_S, SLOW_NOTICE_EVERY_S = 30.0, 60.0
# A whole graph's compile (partitioning, every engine, Inductor's compile of the rest; a detector's can take minutes
# on a CPU) says so later: its engine builds already speak for themselves at the threshold above.
GRAPH_NOTICE_AFTER_S = 120.0


@contextlib.contextmanager
def notice_if_slow(what: str, after: "float | None" = None):
    """While the block runs past ``after`` (``SLOW_NOTICE_AFTER_S`` unless given): "<what>: still running after
    N s" every ``SLOW_NOTICE_EVERY_S``, and "<what>: done in N s" when it ends (from a watcher thread, so a build
    that holds the GIL in C code is still reported when it lets go). Nothing is logged for a block that ends
    sooner."""
    done, noticed, t0 = threading.Event(), threading.Event(), time.perf_counter()

    def watch(wait: float = SLOW_NOTICE_AFTER_S if after is None else after):
        while not done.wait(wait):
            logger.warning("%s: still running after %.0f s", what, time.perf_counter() - t0)
            noticed.set()
            wait = SLOW_NOTICE_EVERY_S
    watcher = threading.Thread(target=watch, name="hybrid_trt-slow-notice", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        done.set()
        watcher.join()
        if noticed.is_set():
            logger.warning("%s: done in %.0f s", what, time.perf_counter() - t0)
