"""Engines addressed by content: the key of a delegated partition (``key``) and the disk store of built engines
(``store``). Layer order: capture -> partition -> lower -> engines -> stitch -> run."""
from .key import canonical_model_bytes, engine_key, environment
from .store import DEFAULT_MAX_BYTES, EngineStore, Entry, default_cache_dir

__all__ = ["canonical_model_bytes", "engine_key", "environment", "DEFAULT_MAX_BYTES",
           "EngineStore", "Entry", "default_cache_dir"]
