"""spyre_runtime: the serving image's entrypoint (precompile, serve, describe)."""

# The version of the spyre-serving distribution (both packages), kept here only:
# pyproject.toml reads it, spyre_operator re-exports it, the image tags and the released
# chart are made from it (scripts/release; tests/unit/test_release.py).
__version__ = "0.1.0"
