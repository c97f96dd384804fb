from setuptools import find_packages, setup

setup(
    name="hybrid_trt",
    version="0.1.0",
    description="TorchDynamo backend: delegate what TensorRT / ONNX Runtime support, compile the rest with "
                "Inductor, stitched into one callable",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    packages=find_packages(include=["hybrid_trt", "hybrid_trt.*"]),
    python_requires=">=3.10",
    # torch 2.11 .. 2.14; torch is not pinned further so an installed build (CPU or CUDA) is kept as it is.
    install_requires=["torch>=2.11,<2.15", "numpy", "onnx>=1.16"],
    extras_require={
        "onnx": ["onnxruntime>=1.20"],
        # models nobody here designed, for benchmarks/conformance.py and tests/test_conformance.py (random weights,
        # nothing downloaded); torchvision must be the release paired with the installed torch (0.26 .. 0.29 for
        # torch 2.11 .. 2.14), so an installed pair is kept; scripts/setup_env.sh installs torch 2.14.1 + 0.29.1
        "conformance": ["torchvision>=0.26,<0.30", "timm>=1.0"],
        "gpu": ["onnxruntime-gpu>=1.20", "tensorrt>=10", "triton>=3.3"],
        # expecttest: torch.testing._internal (PyTorch's OpInfo database, tests/test_opinfo_conformance.py) imports it
        "test": ["pytest>=8", "pytest-xdist>=3", "onnxruntime>=1.20", "triton>=3.3", "torchvision>=0.26,<0.30", "timm>=1.0",
                 "expecttest"],
        # the benchmark exports whole models with torch.onnx (dynamo exporter) for the ONNX Runtime baseline
        "bench": ["onnxruntime>=1.20", "onnxscript"],
    },
    entry_points={"torch_dynamo_backends": ["hybrid_trt = hybrid_trt.backend:hybrid_trt_backend"],
                  "console_scripts": ["hybrid-trt = hybrid_trt.export.cli:main"]},
)
