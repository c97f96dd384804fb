"""Per-call timings of a callable, as a compiled model pays them: the wall time of a synchronised call, or the
device time of its kernels alone (what a CUDA graph replay costs, with the host's launch work gone).

Used by measured placement (placement.py) and by the capture probe's timing of a captured replay
(cudagraphs._probe), so both sides of a placement verdict are timed the same way."""
from __future__ import annotations

import time
from typing import Callable

import torch


def wall_sampler(sync: Callable) -> Callable:
    """``sample(fn)``: milliseconds from calling ``fn`` until ``sync()`` returns."""
    def sample(fn):
        t0 = time.perf_counter()
        fn()
        sync()
        return (time.perf_counter() - t0) * 1e3
    return sample


def device_sampler(host_ms: float, device: torch.device) -> Callable:
    """``sample(fn)``: device milliseconds of ``fn``'s kernels on ``device``. A spin kernel queued first holds the
    stream while the host enqueues the call (``host_ms``: the longest the host takes), so the events around it
    time its kernels back to back, as a CUDA graph replays them. (A callable that synchronises at its end waits
    for the spin, then the end event follows at once.)"""
    with torch.cuda.device(device):
        torch.cuda._sleep(1000)  # its first launch loads the kernel: a calibration including that runs short
        torch.cuda.synchronize(device)
        probe_start, probe_end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        probe_start.record()
        torch.cuda._sleep(10_000_000)
        probe_end.record()
        probe_end.synchronize()
        cycles_per_ms = 10_000_000 / max(probe_start.elapsed_time(probe_end), 1e-3)
    spin = int(cycles_per_ms * (2 * host_ms + 1.0))

    def sample(fn):
        with torch.cuda.device(device):  # the spin and the events on its stream, whichever device is current
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize(device)
            torch.cuda._sleep(spin)
            start.record()
            fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end)
    return sample
