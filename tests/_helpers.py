"""Helpers shared by the test modules."""
import torch


def assert_close(actual, expected, rtol=1e-4, atol=1e-4, what="output"):
    """Structural comparison of (nested tuples of) tensors: same dtype and shape, float values within tolerance,
    integer and bool values equal."""
    if isinstance(expected, (tuple, list)):
        assert isinstance(actual, (tuple, list)) and len(actual) == len(expected), \
            f"{what}: expected {len(expected)} outputs, got {type(actual).__name__} {actual!r:.200}"
        for i, (a, e) in enumerate(zip(actual, expected)):
            assert_close(a, e, rtol, atol, f"{what}[{i}]")
        return
    assert isinstance(actual, torch.Tensor), f"{what}: expected a tensor, got {type(actual).__name__}"
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype} != {expected.dtype}"
    assert actual.shape == expected.shape, f"{what}: shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    if not (expected.is_floating_point() or expected.is_complex()):
        rtol = atol = 0  # integers and flags are exact (a tolerance let 2**60 + 3 pass as 2**60)
    torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol, equal_nan=True, msg=lambda m: f"{what}: {m}")


# Child-process scripts (python -c) paste this: the hybrid_trt logger's warnings into a list ``warnings``
# (the script imports logging first).
CHILD_WARNING_COLLECTOR = r"""
warnings = []
class Collect(logging.Handler):
    def emit(self, record):
        if record.levelno >= logging.WARNING:
            warnings.append(record.getMessage())
logging.getLogger("hybrid_trt").addHandler(Collect())
"""


def run_in_threads(work, n: int = 2, timeout: float = 300.0) -> None:
    """``work(t)`` for t in range(n), each in a thread of its own, all started together; fails when a thread hangs,
    and raises the first exception a thread raised."""
    import threading
    start, errors = threading.Barrier(n), []

    def run(t):
        try:
            start.wait()
            work(t)
        except BaseException as e:  # noqa: BLE001 - raised again in the caller's thread below
            errors.append(e)
    threads = [threading.Thread(target=run, args=(t,)) for t in range(n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=timeout)
    assert not any(th.is_alive() for th in threads), "a thread hung"
    if errors:
        raise errors[0]
