"""GPU check: fp16 torchvision models compiled with every partition delegated and the default CUDA layout (auto:
NHWC for ungrouped fp16 convolutions), against eager; prints the rule's decision per partition engine."""
import sys
import torch
import torchvision
import hybrid_trt
from hybrid_trt.delegates import onnxruntime_delegate as ortd

decided = []
_settings = ortd.session_settings
ortd.session_settings = lambda *a: decided.append(_settings(*a)) or decided[-1]
torch.backends.cudnn.allow_tf32 = False
for name in sys.argv[1:] or ["resnet18", "resnet50", "mobilenet_v3_large"]:
    torch.manual_seed(0)
    model = torchvision.models.get_model(name, weights=None).eval().cuda().half()
    x = torch.randn(2, 3, 224, 224, device="cuda", dtype=torch.half)
    with torch.no_grad():
        ref = model(x)
        out = torch.compile(model, backend="hybrid_trt", options={"placement": "delegate"})(x)
        torch._dynamo.reset()
        nchw = torch.compile(model, backend="hybrid_trt",
                             options={"placement": "delegate", "onnxruntime_cuda_layout": "nchw"})(x)
    rep = hybrid_trt.last_report()
    scale = max(float(ref.float().abs().max()), 1.0)  # MobileNetV3 fp16 with random weights: all zeros
    err = float((out.float() - ref.float()).abs().max()) / scale
    err_nchw = float((nchw.float() - ref.float()).abs().max()) / scale
    print(f"NHWC_CHECK {name}: session settings {decided}; rel err auto layout {err:.2e}, nchw {err_nchw:.2e}, "
          f"{sum(p.status == 'delegated' for p in rep.partitions)} partition(s) delegated", flush=True)
    torch._dynamo.reset()
    decided.clear()
