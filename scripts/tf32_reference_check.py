"""Whose fp32 result is closer to the truth on CUDA: eager, Inductor or hybrid_trt, measured against the same
model run in float64 (GPU machine). PyTorch runs convolutions in TF32 by default (cuDNN's switch) and float32
matmuls in full precision; a hybrid_trt engine holding both kinds uses TF32 for neither (delegates/tf32.py), so
where eager's own TF32 error is large, the engine can differ from eager by more than Inductor does while being
closer to float64. Also run with cuDNN's TF32 switch off, where all three should agree to fp32 rounding.

    python scripts/tf32_reference_check.py --models timm_nf_resnet26,timm_resnet18
"""
from __future__ import annotations

import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="timm_nf_resnet26,timm_resnet18")
    args = ap.parse_args()
    import torch
    import hybrid_trt  # noqa: F401
    from benchmarks.conformance import CASES_BY_NAME, build

    def rel(a, b) -> float:
        return float((a.double() - b.double()).abs().max() / b.double().abs().max())

    for name in args.models.split(","):
        for tf32 in (True, False):
            torch.backends.cudnn.allow_tf32 = tf32
            torch.manual_seed(0)
            model, (x,) = build(CASES_BY_NAME[name])
            with torch.no_grad():
                truth = model.double().cuda()(x.double().cuda())
                model = model.float().cuda()
                x = x.cuda()
                eager = model(x)
                torch._dynamo.reset()
                ind = torch.compile(model, backend="inductor")(x)
                torch._dynamo.reset()
                hyb = torch.compile(model, backend="hybrid_trt")(x)
                torch._dynamo.reset()
            print(f"{name} cudnn.allow_tf32={tf32}: vs eager: hybrid {rel(hyb, eager):.2e}, Inductor "
                  f"{rel(ind, eager):.2e}; vs float64: eager {rel(eager, truth):.2e}, Inductor {rel(ind, truth):.2e}, "
                  f"hybrid {rel(hyb, truth):.2e}", flush=True)


if __name__ == "__main__":
    main()
