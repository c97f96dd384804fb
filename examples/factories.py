"""Factories for the ``hybrid-trt`` command line: ``MODULE:FACTORY`` names a function that takes no arguments and
returns ``(model, example_inputs)``, e.g. ``hybrid-trt export examples.factories:detector --out detector.pkg``."""
from examples.models import build


def resnet18():
    return build("resnet18")


def detector():
    return build("detector")


def transformer():
    return build("transformer")
