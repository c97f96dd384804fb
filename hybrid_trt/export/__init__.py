"""Export and deploy: build engines ahead of time into one package, load it on the target without building.

``hybrid_trt.export(model, example_inputs, ..., path=...)`` writes the package; ``hybrid_trt.load(path)``
returns a callable; ``hybrid_trt.verify(path)`` runs every check of a package on this machine; ``hybrid-trt``
(``cli.py``) exports, inspects, verifies and benchmarks packages.
"""
from .api import ExportError, export
from .deploy import DeployedModel, load
from .package import EXIT_CODES, PackageError
from .verification import verify
from ..engines.runtime import BuildInDeployMode, EngineCallFailed, EngineNotInPackage  # what a package raises

__all__ = ["export", "load", "verify", "DeployedModel", "ExportError", "PackageError", "EXIT_CODES",
           "EngineNotInPackage", "BuildInDeployMode", "EngineCallFailed"]
