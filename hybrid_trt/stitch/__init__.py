"""Stitching: delegated partitions become calls of one custom op inside the graph Inductor compiles."""
