"""spyre_runtime: the serving image's entrypoint (precompile, serve, describe)."""

__version__ = "0.1.0"
