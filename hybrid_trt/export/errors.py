"""The one error export raises for what it cannot package (its own module: the input handling raises it too)."""


class ExportError(RuntimeError):
    """Export could not produce a package; the message says what failed and what to do."""
