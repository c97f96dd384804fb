"""Partitioning: which delegate may run each node (capability), then cycle-free blocks per delegate."""
from .capability import NodeKind, classify
from .partition import Partition, PartitionPlan, partition_graph

__all__ = ["NodeKind", "classify", "Partition", "PartitionPlan", "partition_graph"]
