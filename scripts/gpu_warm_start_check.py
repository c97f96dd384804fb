"""GPU check of the engine store (issue 8): compile ResNet-18 on CUDA with hybrid_trt in this process and print
the report (built or loaded per engine) and the error against eager. Run twice with the same HYBRID_TRT_CACHE_DIR
and TORCHINDUCTOR_CACHE_DIR: the second process must load every engine (ONNX Runtime's stored optimized model on
the CUDA provider) and match eager."""
import sys
import time

import torch

import hybrid_trt
from examples.models import build


def main():
    model, x = build("resnet18")
    model, x = model.cuda().eval(), x.cuda()
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    with torch.no_grad():
        t0 = time.perf_counter()
        out = torch.compile(model, backend="hybrid_trt")(x)
        torch.cuda.synchronize()
        seconds = time.perf_counter() - t0
        err = (out - model(x)).abs().max().item()
    print(hybrid_trt.last_report().table())
    print(f"{sys.argv[1] if len(sys.argv) > 1 else 'run'}: compile to first output {seconds:.1f} s, "
          f"max abs error vs eager {err:.3g}")


if __name__ == "__main__":
    main()
