"""Fixtures of the image tests."""

from __future__ import annotations

import os

import pytest

from spyre_devcluster.images import recipes
from spyre_devcluster.images.store import Image


@pytest.fixture(scope="module")
def pause() -> Image:
    """The pause image, the smallest the builder makes (built once, cached)."""
    if os.geteuid() != 0:
        pytest.skip("building images needs root (overlay mounts, chroot, containerd)")
    (image,) = recipes.build_images(["pause"])
    return image
