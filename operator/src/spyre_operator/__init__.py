"""spyre_operator: a kopf operator that serves models on IBM Spyre with vLLM-Spyre."""

# The distribution's version, kept in one place (spyre_runtime: the same wheel)
from spyre_runtime import __version__

__all__ = ["__version__"]
