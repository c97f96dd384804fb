"""Per-partition runtime: engines keyed by input-shape signature, built on first sight of a shape, bounded, with
Inductor as the fallback that always completes."""
from __future__ import annotations

import time
from typing import Callable, Optional, Sequence

import torch
import torch.fx as fx

from torch._subclasses.fake_tensor import unset_fake_temporarily

from ..delegates import Engine, get_delegate
from ..log import logger
from ..lowerings.to_onnx import lower_partition
from ..report import EngineRecord, PartitionReport
from .delegate_op import register_runtime


class DelegateBuildError(RuntimeError):
    pass


class _FakeInterpreter(fx.Interpreter):
    """Runs the partition under the active fake mode; constants become fake tensors of the same layout."""

    def get_attr(self, target, args, kwargs):
        real = super().get_attr(target, args, kwargs)
        return torch.empty_strided(real.shape, real.stride(), dtype=real.dtype, device=real.device)


class PartitionRuntime:
    def __init__(self, name: str, module: fx.GraphModule, delegate: str, device: torch.device, options,
                 report: PartitionReport, symbolic: bool):
        self.name = name
        self.module = module
        self.delegate = get_delegate(delegate)
        self.device = device
        self.options = options
        self.report = report
        self.symbolic = symbolic
        self._engines: dict = {}  # signature -> callable(inputs) (engines, or the Inductor fallback)
        self._built = 0
        self._fallback: Optional[Callable] = None
        self._static_outputs: Optional[list] = None
        self.handle = register_runtime(self)
        # Static partitions have exactly one signature (Dynamo guards on it): skip the key on the hot path.
        self.run = self._run_dynamic if symbolic else self._run_static
        self._static_engine: Optional[Callable] = None

    # -- compile time --------------------------------------------------------------------------------------------
    def build_static(self, input_metas: Sequence[torch.Tensor]) -> None:
        """Build the single engine of a static partition now, so failures surface at compile time."""
        shapes = [tuple(int(s) for s in m.shape) for m in input_metas]
        dtypes = [m.dtype for m in input_metas]
        self._static_engine, metas = self._build(shapes, dtypes, ())
        self._static_outputs = [(tuple(o.shape), o.dtype) for o in metas]

    def _build(self, shapes, dtypes, sizes) -> tuple[Engine, list]:
        # Compile-time builds happen while Dynamo's fake mode is active; lowering needs the real weights.
        with unset_fake_temporarily():
            return self._build_real(shapes, dtypes, sizes)

    def _build_real(self, shapes, dtypes, sizes) -> tuple[Engine, list]:
        signature = ", ".join("x".join(map(str, s)) for s in shapes) + (f" sizes={list(sizes)}" if sizes else "")
        t0 = time.perf_counter()
        try:
            model, metas = lower_partition(self.module, shapes, dtypes, sizes)
        except Exception as e:
            raise DelegateBuildError(f"lowering failed: {e}") from e
        t1 = time.perf_counter()
        logger.info("hybrid_trt: %s: building %s engine for [%s] ...", self.name, self.delegate.name, signature)
        try:
            engine = self.delegate.build(model, metas, self.device, self.options)
        except Exception as e:
            raise DelegateBuildError(f"{self.delegate.name} build failed: {e}") from e
        t2 = time.perf_counter()
        self._built += 1
        self.report.engines.append(EngineRecord(signature, t1 - t0, t2 - t1))
        logger.info("hybrid_trt: %s engine %d built for [%s] in %.2f s (lowering %.2f s)", self.name, self._built,
                    signature, t2 - t0, t1 - t0)
        return engine, metas

    # -- fake (shape propagation during tracing and Inductor lowering) ----------------------------------------
    def fake(self, inputs, sizes):
        if self._static_outputs is not None:
            device = inputs[0].device if inputs else self.device
            return [torch.empty(shape, dtype=dtype, device=device) for shape, dtype in self._static_outputs]
        outs = _FakeInterpreter(self.module).run(*inputs, *sizes)
        # Engines return contiguous tensors: say so, whatever strides the ATen ops would have produced.
        return [o.new_empty(o.shape) for o in outs]

    # -- run time (hot path) -----------------------------------------------------------------------------------
    def _run_static(self, inputs, sizes):
        return self._static_engine(inputs)

    def _run_dynamic(self, inputs, sizes):
        key = (tuple(t.shape for t in inputs), tuple(sizes))
        runner = self._engines.get(key)
        if runner is None:
            return self._first_call(key, inputs, sizes)
        return runner(inputs, sizes)

    # -- slow paths ----------------------------------------------------------------------------------------------
    def _first_call(self, key, inputs, sizes):
        if self._built >= self.options.max_engines_per_partition:
            self.report.events.append(
                f"engine bound {self.options.max_engines_per_partition} reached: shape {_sig(inputs, sizes)} "
                "runs through Inductor")
            logger.warning("hybrid_trt: %s reached max_engines_per_partition=%d; shape %s runs through Inductor",
                           self.name, self.options.max_engines_per_partition, _sig(inputs, sizes))
            return self._route_to_inductor(key, inputs, sizes)
        try:
            engine, _ = self._build([tuple(t.shape) for t in inputs], [t.dtype for t in inputs], tuple(sizes))
            outs = engine(inputs)
        except Exception as e:
            if self.options.strict:
                raise
            self._fall_back(f"shape {_sig(inputs, sizes)}: {e}")
            return self._route_to_inductor(key, inputs, sizes)
        self._engines[key] = lambda ins, _sizes, engine=engine: engine(ins)
        return outs

    def _route_to_inductor(self, key, inputs, sizes):
        """This shape signature runs through the partition's Inductor fallback from now on."""
        self._engines[key] = self._inductor_runner()
        return self._engines[key](inputs, sizes)

    def _fall_back(self, why: str) -> None:
        self.report.events.append(f"fell back to Inductor: {why}")
        logger.warning("hybrid_trt: %s (%s) falls back to Inductor: %s", self.name, self.delegate.name, why)

    def _inductor_runner(self):
        if self._fallback is None:
            compiled = torch.compile(self.module, backend="inductor", dynamic=self.symbolic)

            def run(inputs, sizes):
                out = compiled(*inputs, *sizes)
                return [o.contiguous() for o in out]
            self._fallback = run
        return self._fallback

    def first_call_guard(self):
        """Wrap the static engine so that a failing first call falls back to Inductor (strict: raises)."""
        engine = self._static_engine

        def first(inputs):
            try:
                outs = engine(inputs)
            except Exception as e:
                if self.options.strict:
                    raise
                self.report.status = "fell back to Inductor"  # the partition's only engine is gone
                self._fall_back(f"first call failed: {e}")
                runner = self._inductor_runner()
                self._static_engine = lambda ins: runner(ins, ())
                return self._static_engine(inputs)
            self._static_engine = engine
            return outs
        self._static_engine = first


def _sig(inputs, sizes) -> str:
    shapes = "[" + ", ".join("x".join(map(str, t.shape)) for t in inputs) + "]"
    return shapes + (f" sizes={list(sizes)}" if sizes else "")
