"""Stitching: each delegated partition becomes one ``hybrid_trt::delegate`` call carrying its content key; the
rest of the graph goes to Inductor. Only rewrites graphs: engines and their runtime live in ``engines/``."""
