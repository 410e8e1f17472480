"""spyre_operator: a kopf operator that serves models on IBM Spyre with vLLM-Spyre."""

__version__ = "0.1.0"
