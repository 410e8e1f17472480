"""spyre_runtime: the serving image's entrypoint (precompile, serve, describe)."""

# The distribution's version, kept in one place (spyre_operator: the same wheel)
from spyre_operator import __version__

__all__ = ["__version__"]
