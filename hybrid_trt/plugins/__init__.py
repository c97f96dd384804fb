"""Plugins: custom ops routed through hybrid_trt as a unit (their own ops, fake implementations, lowerings to
a custom ONNX domain that a delegate accepts). Importing a plugin's package defines its ops; the plugin
registry (``registry.py``) registers its lowerings when a compiled or exported graph first calls one of them.

- ``hybrid_trt.plugins.sparse``: 3D sparse convolution (SubM, strided, inverse) for point-cloud models.
"""
