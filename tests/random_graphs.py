"""A seeded generator of random models mixing ops the ONNX lowerings support with ops they do not.

``RandomGraph(seed)`` writes the source of an ``nn.Module`` (printed in failure messages, so a failing graph can
be read and re-run) over float (float32 or float64), int64 and bool values of one shape (3-D or 4-D), with
weights as parameters and buffers. It keeps the comparison with eager meaningful:

- magnitudes stay bounded (every value carries a bound; large ones are squashed before products);
- discrete ops (comparisons, floor/round, casts to int) only see *exact* values: graph inputs and values
  derived from them without rounding (neg, abs, relu, max/min, where, clamp, slicing, ...), so rounding
  differences between backends can never flip a comparison or an integer.

Run one graph:  python tests/random_graphs.py SEED
"""
from __future__ import annotations

import dataclasses
import math
import random
import sys
import textwrap

import torch
import torch.nn as nn
import torch.nn.functional as F

F32, F64 = torch.float32, torch.float64


@dataclasses.dataclass
class Val:
    name: str
    kind: str  # "f" float, "i" int64, "b" bool
    exact: bool = True
    bound: float = 1.0
    uses: int = 0


class RandomGraph:
    def __init__(self, seed: int, n_ops: int | None = None):
        self.seed = seed
        rng = self.rng = random.Random(seed)
        self.rank = 4 if rng.random() < 0.35 else 3
        self.fdtype = F64 if rng.random() < 0.2 else F32
        if self.rank == 4:
            self.shape = (rng.randint(1, 2), rng.randint(1, 4), 2 * rng.randint(1, 3), 2 * rng.randint(1, 3))
        else:
            self.shape = (rng.randint(1, 3), rng.randint(1, 5), rng.randint(1, 6))
        self.lines: list[str] = []
        self.vals: list[Val] = []
        self.inputs: list[tuple[str, str]] = []  # (name, kind)
        self.params: dict[str, tuple[str, tuple]] = {}  # name -> ("param" | "buffer", shape / init spec)
        self._n = 0
        gen = torch.Generator().manual_seed(seed)
        self._gen = gen
        n_float = rng.randint(1, 3)
        for _ in range(n_float):
            self._input("f")
        if rng.random() < 0.5:
            self._input("i")
        if rng.random() < 0.4:
            self._input("b")
        for _ in range(n_ops if n_ops is not None else rng.randint(4, 16)):
            self._step()
        self.outputs = self._pick_outputs()

    # -- bookkeeping ---------------------------------------------------------------------------------------------
    def _input(self, kind):
        name = f"x{len(self.inputs)}"
        self.inputs.append((name, kind))
        self.vals.append(Val(name, kind, exact=True, bound={"f": 4.5, "i": 8, "b": 1}[kind]))

    def _new(self, expr, kind, exact, bound) -> Val:
        name = f"v{self._n}"
        self._n += 1
        self.lines.append(f"{name} = {expr}")
        v = Val(name, kind, exact, bound)
        self.vals.append(v)
        return v

    def _pick(self, kind, exact=False) -> Val | None:
        pool = [v for v in self.vals if v.kind == kind and (v.exact or not exact)]
        if not pool:
            return None
        recent = pool[-3:]
        v = self.rng.choice(recent if self.rng.random() < 0.7 else pool)
        v.uses += 1
        return v

    def _param(self, shape, kind="param", init="randn") -> str:
        name = f"p{len(self.params)}"
        self.params[name] = (kind, tuple(shape), init)
        return f"self.{name}"

    def _float(self, exact=False) -> Val:
        v = self._pick("f", exact)
        if v is None:  # make one from what there is
            src = self._pick("i") or self._pick("b")
            v = self._new(f"{src.name}.to({self._dt})", "f", True, src.bound)
        return v

    def _small(self, v: Val, limit=8.0) -> Val:
        """A version of v with |v| <= limit (squashing large values first)."""
        if v.bound <= limit:
            return v
        return self._new(f"torch.tanh({v.name} * {1.0 / v.bound:.6g}) * 4", "f", False, 4.0)

    @property
    def _dt(self):
        return "torch.float64" if self.fdtype == F64 else "torch.float32"

    def _dim(self):
        return self.rng.randrange(self.rank)

    # -- ops -----------------------------------------------------------------------------------------------------
    def _step(self):
        r = self.rng.random()
        kinds_present = {v.kind for v in self.vals}
        if r < 0.18:
            self._unsupported()
        elif r < 0.26 and "i" in kinds_present:
            self._int_op()
        elif r < 0.31 and "b" in kinds_present:
            self._bool_op()
        elif r < 0.38:
            self._to_discrete()
        elif r < 0.52:
            self._binary()
        elif r < 0.66:
            self._structured()
        else:
            self._unary()

    def _unary(self):
        a = self._float()
        s = self._small(a)
        choices = [
            (f"torch.relu({a.name})", a.exact, a.bound),
            (f"torch.neg({a.name})", a.exact, a.bound),
            (f"torch.abs({a.name})", a.exact, a.bound),
            (f"torch.clamp({a.name}, -1.5, 2.0)", a.exact, 2.0),
            (f"F.hardtanh({a.name})", a.exact, 1.0),
            (f"torch.floor({a.name})", a.exact, a.bound + 1),
            (f"torch.ceil({a.name})", a.exact, a.bound + 1),
            (f"torch.round({a.name} * 2)", a.exact, 2 * a.bound + 1),
            (f"torch.sigmoid({a.name})", False, 1.0),
            (f"torch.tanh({a.name})", False, 1.0),
            (f"torch.sin({a.name})", False, 1.0),
            (f"torch.cos({a.name})", False, 1.0),
            (f"torch.erf({a.name})", False, 1.0),
            (f"torch.atan({a.name})", False, 1.6),
            (f"F.silu({a.name})", False, a.bound),
            (f"F.gelu({a.name})", False, a.bound),
            (f"F.gelu({a.name}, approximate='tanh')", False, a.bound),
            (f"F.hardswish({a.name})", False, a.bound),
            (f"F.hardsigmoid({a.name})", False, 1.0),
            (f"F.leaky_relu({a.name}, 0.1)", False, a.bound),
            (f"F.elu({a.name})", False, a.bound),
            (f"F.softplus({a.name})", False, a.bound + 1),
            (f"F.mish({s.name})", False, s.bound),
            (f"torch.exp(torch.clamp({a.name}, -3, 3))", False, 20.1),
            (f"torch.log(torch.abs({a.name}) + 1)", False, math.log(a.bound + 1)),
            (f"torch.sqrt(torch.abs({a.name}))", False, math.sqrt(a.bound)),
            (f"torch.rsqrt(torch.abs({a.name}) + 0.5)", False, 1.5),
            (f"torch.reciprocal(torch.abs({a.name}) + 0.5)", False, 2.0),
            (f"torch.log1p(torch.abs({a.name}))", False, math.log(a.bound + 1)),
            (f"torch.expm1(torch.clamp({a.name}, -2, 2))", False, 6.4),
            (f"torch.pow(torch.abs({s.name}) + 0.1, 1.5)", False, (s.bound + 0.1) ** 1.5),
            (f"{s.name} * {s.name}", False, s.bound ** 2),
            (f"{a.name} * 0.5 - 0.25", False, a.bound),
            (f"torch.full_like({a.name}, 1.5) - {a.name}", False, a.bound + 1.5),
        ]
        expr, exact, bound = self.rng.choice(choices)
        self._new(expr, "f", exact, bound)

    def _binary(self):
        a, b = self._float(), self._float()
        sa, sb = self._small(a), self._small(b)
        last = self.shape[-1]
        choices = [
            (f"{a.name} + {b.name}", False, a.bound + b.bound),
            (f"{a.name} - {b.name}", False, a.bound + b.bound),
            (f"{sa.name} * {sb.name}", False, sa.bound * sb.bound),
            (f"{a.name} / (torch.abs({b.name}) + 0.5)", False, 2 * a.bound),
            (f"torch.maximum({a.name}, {b.name})", a.exact and b.exact, max(a.bound, b.bound)),
            (f"torch.minimum({a.name}, {b.name})", a.exact and b.exact, max(a.bound, b.bound)),
            (f"torch.where({a.name} > {b.name}, {a.name}, {b.name})", a.exact and b.exact, max(a.bound, b.bound)),
            (f"torch.clamp({a.name}, min={b.name})", a.exact and b.exact, max(a.bound, b.bound)),
            (f"{a.name} + torch.arange({last}, dtype={self._dt})", False, a.bound + last),
        ]
        if last >= 2:
            k = self.rng.randint(1, last - 1)
            choices.append((f"torch.cat([{a.name}[..., :{k}], {b.name}[..., {k}:]], dim=-1)", a.exact and b.exact,
                            max(a.bound, b.bound)))
        expr, exact, bound = self.rng.choice(choices)
        self._new(expr, "f", exact, bound)

    def _structured(self):
        a = self._float()
        s = self._small(a)
        d = self._dim()
        n = self.shape
        common = [
            (f"{a.name} - {a.name}.mean(dim={d}, keepdim=True)", False, 2 * a.bound),
            (f"{a.name} - {a.name}.amax(dim={d}, keepdim=True)", False, 2 * a.bound),
            (f"{a.name}.amin(dim={d}, keepdim=True) + {a.name}", False, 2 * a.bound),
            (f"{a.name}.sum(dim={d}, keepdim=True) * 0.25 + {a.name}", False, a.bound * (1 + n[d] / 4)),
            (f"{a.name} / (torch.var({a.name}, dim={d}, keepdim=True, unbiased=False) + 1)", False, a.bound),
            (f"torch.softmax({a.name}, dim={d})", False, 1.0),
            (f"torch.log_softmax({s.name}, dim={d})", False, 2 * s.bound + math.log(n[d]) + 1),
            (f"torch.cumsum({a.name}, dim={d})", False, a.bound * n[d]),
            (f"F.layer_norm({a.name}, ({n[-1]},), eps=1e-3)", False, math.sqrt(n[-1]) + 1),
        ]
        if self.rank == 3:
            b, c, l = n
            w = self._param((l, l), init="linear")
            choices = common + [
                (f"torch.matmul({s.name}, {w})", False, s.bound * math.sqrt(l) * 2),
                (f"F.linear({s.name}, {w}, {self._param((l,), init='small')})", False, s.bound * math.sqrt(l) * 2 + 1),
                (f"{a.name}.transpose(1, 2).reshape(-1, {c}, {l})", a.exact, a.bound),
                (f"{a.name}.permute(0, 2, 1).flatten(1).reshape(-1, {c}, {l})", a.exact, a.bound),
                (f"torch.bmm(torch.softmax(torch.bmm({s.name}, {s.name}.transpose(1, 2)) * 0.1, dim=-1), {a.name})",
                 False, a.bound),
                (f"F.layer_norm({a.name}, ({l},), {self._param((l,), init='one')}, {self._param((l,), init='small')})",
                 False, 2 * math.sqrt(l) + 2),
                (f"{a.name}[:, :, ::2].repeat(1, 1, 2)[:, :, :{l}]", a.exact, a.bound),
            ]
        else:
            b, c, h, w_ = n
            kw = self._param((c, c, 3, 3), init="conv")
            choices = common + [
                (f"F.conv2d({s.name}, {kw}, {self._param((c,), init='small')}, padding=1)", False,
                 s.bound * 3 * math.sqrt(c) + 1),
                (f"F.conv2d({s.name}, {self._param((c, 1, 3, 3), init='conv')}, None, padding=1, groups={c})", False,
                 s.bound * 3 + 1),
                (f"F.batch_norm({a.name}, {self._param((c,), 'buffer', 'small')}, "
                 f"{self._param((c,), 'buffer', 'var')}, {self._param((c,), init='one')}, "
                 f"{self._param((c,), init='small')}, training=False)", False, 2 * a.bound + 2),
                (f"F.max_pool2d({a.name}, 3, 1, 1)", a.exact, a.bound),
                (f"F.avg_pool2d({a.name}, 3, 1, 1)", False, a.bound),
                (f"F.interpolate(F.avg_pool2d({a.name}, 2), scale_factor=2, mode='nearest')", False, a.bound),
                (f"F.interpolate(F.max_pool2d({a.name}, 2), scale_factor=2, mode='bilinear')", False, a.bound),
                (f"F.interpolate({a.name}[:, :, ::2, ::2], size=({h}, {w_}), mode='bilinear', align_corners=True)",
                 False, a.bound),
                (f"{a.name} - F.adaptive_avg_pool2d({a.name}, 1)", False, 2 * a.bound),
                (f"F.pad({a.name}, (1, 1, 2, 0))[:, :, 2:, 1:-1]", a.exact, a.bound),
                (f"{a.name}.permute(0, 2, 3, 1).reshape(-1, {c}, {h}, {w_})", a.exact, a.bound),
                (f"{a.name}.flatten(2).transpose(1, 2).reshape(-1, {c}, {h}, {w_})", a.exact, a.bound),
            ]
        expr, exact, bound = self.rng.choice(choices)
        self._new(expr, "f", exact, bound)

    def _unsupported(self):
        """Ops no lowering exists for: they stay with Inductor and cut partitions."""
        r = self.rng.random()
        if r < 0.2 and any(v.kind == "i" for v in self.vals):
            i, j = self._pick("i"), self._pick("i")
            d = self._dim()
            expr, bound = self.rng.choice([
                (f"torch.bitwise_xor({i.name}, {j.name})", 2 * max(i.bound, j.bound)),
                (f"torch.bitwise_and({i.name}, {j.name})", max(i.bound, j.bound)),
                (f"torch.cumprod(torch.clamp({i.name}, -2, 2), dim={d})", 2.0 ** self.shape[d]),
            ])
            self._new(expr, "i", True, bound)
            return
        if r < 0.3 and any(v.kind == "b" for v in self.vals):
            m, k = self._pick("b"), self._pick("b")
            self._new(f"torch.bitwise_xor({m.name}, {k.name})", "b", True, 1)
            return
        a, b = self._float(), self._float()
        d = self._dim()
        expr, bound = self.rng.choice([
            (f"torch.atan2({a.name}, {b.name})", 3.2),
            (f"torch.erfinv(torch.tanh({a.name}) * 0.9)", 1.2),
            (f"torch.cumprod(torch.tanh({a.name}), dim={d})", 1.0),
            (f"torch.sinh(torch.tanh({a.name}))", 1.2),
            (f"torch.hypot({a.name}, {b.name})", a.bound + b.bound),
            (f"torch.lgamma(torch.abs({a.name}) + 1)", a.bound * math.log(a.bound + 2) + 1),
            (f"torch.special.i0(torch.clamp({a.name}, -3, 3))", 5.0),
        ])
        self._new(expr, "f", False, bound)

    def _int_op(self):
        i, j = self._pick("i"), self._pick("i")
        d = self._dim()
        if max(i.bound, j.bound) > 1000:
            i = self._new(f"torch.clamp({i.name}, -50, 50)", "i", True, 50)
        choices = [
            (f"{i.name} + {j.name}", i.bound + j.bound),
            (f"{i.name} - {j.name}", i.bound + j.bound),
            (f"torch.clamp({i.name} * {j.name}, -40, 40)", 40),
            (f"torch.abs({i.name})", i.bound),
            (f"torch.neg({i.name})", i.bound),
            (f"torch.relu({i.name})", i.bound),
            (f"torch.maximum({i.name}, {j.name})", max(i.bound, j.bound)),
            (f"torch.minimum({i.name}, {j.name})", max(i.bound, j.bound)),
            (f"torch.div({i.name}, torch.abs({j.name}) + 1, rounding_mode='floor')", i.bound),
            (f"torch.div({i.name}, 3, rounding_mode='trunc')", i.bound),
            (f"{i.name} // 2", i.bound),
            (f"torch.remainder({i.name}, 3)", 3),
            (f"{i.name} % (torch.abs({j.name}) + 1)", j.bound + 1),
            (f"{i.name}.sum(dim={d}, keepdim=True) - {i.name}", i.bound * (self.shape[d] + 1)),
            (f"{i.name}.amax(dim={d}, keepdim=True) + {j.name}", i.bound + j.bound),
            (f"torch.cumsum({i.name}, dim={d})", i.bound * self.shape[d]),
            (f"torch.clamp({i.name}, -3, 3)", 3),
        ]
        expr, bound = self.rng.choice(choices)
        self._new(expr, "i", True, bound)

    def _bool_op(self):
        m, k = self._pick("b"), self._pick("b")
        r = self.rng.random()
        if r < 0.5:
            expr = self.rng.choice([f"{m.name} & {k.name}", f"{m.name} | {k.name}", f"~{m.name}",
                                    f"torch.logical_xor({m.name}, {k.name})", f"torch.logical_not({m.name})",
                                    f"torch.logical_and({m.name}, {k.name})"])
            self._new(expr, "b", True, 1)
        elif r < 0.8:
            a, b = self._float(), self._float()
            expr, exact, bound = self.rng.choice([
                (f"torch.where({m.name}, {a.name}, {b.name})", a.exact and b.exact, max(a.bound, b.bound)),
                (f"torch.where({m.name}, {a.name}, 0.0)", a.exact, a.bound),
                (f"{a.name}.masked_fill({m.name}, -1.0)", a.exact, max(a.bound, 1.0)),
                (f"{m.name}.to({self._dt}) * {a.name}", a.exact, a.bound),
            ])
            self._new(expr, "f", exact, bound)
        else:
            i = self._pick("i")
            if i is not None and self.rng.random() < 0.5:
                self._new(f"torch.where({m.name}, {i.name}, -{i.name})", "i", True, i.bound)
            else:
                self._new(self.rng.choice([f"{m.name}.to(torch.int64)",
                                           f"{m.name}.sum(dim={self._dim()}, keepdim=True) + {m.name}.long()"]),
                          "i", True, self.shape[0] * 10)

    def _to_discrete(self):
        """Comparisons and integer casts, on exact values only."""
        r = self.rng.random()
        if r < 0.35 and any(v.kind == "i" for v in self.vals):
            i, j = self._pick("i"), self._pick("i")
            expr = self.rng.choice([f"{i.name} > 0", f"{i.name} == {j.name}", f"{i.name} % 2 == 0",
                                    f"{i.name} <= {j.name}", f"{i.name} != 1"])
            self._new(expr, "b", True, 1)
            return
        a = self._float(exact=True)
        if r < 0.7:
            b = self._pick("f", exact=True) or a
            expr = self.rng.choice([f"{a.name} > {b.name}", f"{a.name} >= 0.0", f"{a.name} < 0.5",
                                    f"{a.name} == {b.name}", f"{a.name} != 0", f"{a.name} <= {b.name}"])
            self._new(expr, "b", True, 1)
        else:
            expr = self.rng.choice([f"torch.floor({a.name} * 2).to(torch.int64)", f"{a.name}.to(torch.int64)",
                                    f"torch.round({a.name}).long()"])
            self._new(expr, "i", True, 2 * a.bound + 1)
            if self.rng.random() < 0.5:
                i = self.vals[-1]
                self._new(f"{i.name}.to({self._dt}) * 0.5", "f", True, i.bound)

    def _pick_outputs(self) -> list[str]:
        derived = [v for v in self.vals if not any(v.name == n for n, _ in self.inputs)]
        sinks = [v for v in derived if v.uses == 0]
        outs = sinks[-4:] or derived[-1:]
        extra = [v for v in derived if v not in outs]
        if extra and self.rng.random() < 0.5:
            outs.append(self.rng.choice(extra))
        return [v.name for v in outs]

    # -- materialising -------------------------------------------------------------------------------------------
    def source(self) -> str:
        args = ", ".join(n for n, _ in self.inputs)
        body = "\n".join(self.lines + [f"return ({', '.join(self.outputs)},)"])
        return f"def forward(self, {args}):\n" + textwrap.indent(body, "    ")

    def module(self) -> nn.Module:
        ns = {"torch": torch, "F": F}
        exec(compile(self.source(), f"<random graph seed={self.seed}>", "exec"), ns)
        cls = type(f"RandomGraph{self.seed}", (nn.Module,), {"forward": ns["forward"]})
        m = cls()
        gen = torch.Generator().manual_seed(self.seed + 1)
        for name, (kind, shape, init) in self.params.items():
            if init == "randn":
                t = torch.randn(shape, generator=gen)
            elif init == "linear":
                t = torch.randn(shape, generator=gen) / math.sqrt(shape[-1])
            elif init == "conv":
                t = torch.randn(shape, generator=gen) / math.sqrt(shape[1] * 9)
            elif init == "small":
                t = torch.randn(shape, generator=gen) * 0.1
            elif init == "one":
                t = 1 + torch.randn(shape, generator=gen) * 0.1
            elif init == "var":
                t = torch.rand(shape, generator=gen) + 0.5
            else:
                raise AssertionError(init)
            t = t.to(self.fdtype)
            if kind == "param":
                m.register_parameter(name, nn.Parameter(t, requires_grad=False))
            else:
                m.register_buffer(name, t)
        m.eval()
        return m

    def example_inputs(self, batch: int | None = None) -> list[torch.Tensor]:
        """Inputs of the graph's shape; ``batch`` replaces the leading size (graphs never bake it in)."""
        gen = torch.Generator().manual_seed(self.seed if batch is None else self.seed * 7919 + batch)
        shape = self.shape if batch is None else (batch,) + tuple(self.shape[1:])
        out = []
        for _, kind in self.inputs:
            if kind == "f":
                out.append(torch.randn(shape, generator=gen).clamp(-4.5, 4.5).to(self.fdtype))
            elif kind == "i":
                out.append(torch.randint(-8, 9, shape, generator=gen))
            else:
                out.append(torch.rand(shape, generator=gen) > 0.5)
        return out

    def describe(self) -> str:
        return (f"random graph seed={self.seed} (rank {self.rank}, shape {self.shape}, "
                f"{str(self.fdtype).replace('torch.', '')}):\n{self.source()}")


if __name__ == "__main__":  # print one graph and check it alone
    import hybrid_trt  # noqa: F401
    for arg in sys.argv[1:]:
        g = RandomGraph(int(arg))
        print(g.describe())
        m, x = g.module(), g.example_inputs()
        with torch.no_grad():
            ref = m(*x)
            out = torch.compile(m, backend="hybrid_trt", options={"min_block_size": 1})(*x)
        for k, (o, r) in enumerate(zip(out, ref)):
            torch.testing.assert_close(o, r, rtol=1e-4, atol=1e-4, msg=lambda s: f"output {k}: {s}")
        print(hybrid_trt.last_report())
