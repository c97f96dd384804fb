"""The one logger of the package: everything user-visible goes through ``logging.getLogger("hybrid_trt")``."""
import logging

logger = logging.getLogger("hybrid_trt")
