"""The chart as scripts/release packages it: the project's version, and default image
repositories naming the registry it is published to (`helm package`, `helm show`)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from chartlib import helm

from spyre_devcluster import release
from spyre_operator import __version__

pytestmark = pytest.mark.chart


def test_the_packaged_chart_names_the_registry_it_is_published_to(tmp_path: Path) -> None:
    target = release.Target.parse("registry.example.com:5000/mirror/spyre")
    package = release.package_chart(target, __version__, tmp_path)
    assert package.is_file()
    chart = yaml.safe_load(helm("show", "chart", str(package)).stdout)
    assert chart["version"] == chart["appVersion"] == __version__
    images = chart["annotations"]["artifacthub.io/images"]
    assert f"registry.example.com:5000/mirror/spyre/operator:{__version__}" in images
    values = yaml.safe_load(helm("show", "values", str(package)).stdout)
    assert values["image"]["repository"] == "registry.example.com:5000/mirror/spyre/operator"
    # the CPU serving image the release pushes (none for cards: card models name theirs)
    runtime = values["runtimeImage"]["repository"]
    assert runtime == f"registry.example.com:5000/mirror/spyre/{release.RUNTIME_CPU}"
    assert values["runtimeImage"]["cards"] is False
