"""Issue 7 defect 5 check (GPU): compile fp16 conv models on CUDA through ONNX Runtime's CUDA provider and print
whether they match eager. Run with stderr captured: no `[E:onnxruntime` / `[W:onnxruntime` line may appear."""
import logging

import torch
import torch.nn as nn

import hybrid_trt  # noqa: F401

logging.basicConfig(level=logging.WARNING)


def main():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
                          nn.Conv2d(32, 64, 3, stride=2, padding=1), nn.ReLU(),
                          nn.Conv2d(64, 64, 1), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10))
    model = model.eval().cuda().half()
    x = torch.randn(2, 3, 64, 64, device="cuda", dtype=torch.half)
    with torch.no_grad():
        expected = model(x)
        out = torch.compile(model, backend="hybrid_trt")(x)
    torch.cuda.synchronize()
    err = (out.float() - expected.float()).abs().max().item()
    print(hybrid_trt.last_report().table())
    print(f"max abs error vs eager: {err:.3g}; match: {err < 5e-2}")


if __name__ == "__main__":
    main()
