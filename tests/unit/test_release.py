"""The release: one version everywhere, REGISTRY and VERSION checked before anything is
built, and the CI workflow running exactly scripts/release on a tag."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
import yaml

import spyre_runtime
from spyre_devcluster import release
from spyre_devcluster.release import ReleaseError, Target
from spyre_operator import __version__

pytestmark = pytest.mark.unit

ROOT = Path(__file__).parents[2]
VERSION_FILE = "image/src/spyre_runtime/__init__.py"


def test_the_version_lives_in_one_place_and_the_chart_agrees() -> None:
    for pyproject in (ROOT / "pyproject.toml", ROOT / "devcluster" / "pyproject.toml"):
        config = tomllib.loads(pyproject.read_text())
        assert "version" not in config["project"], f"{pyproject}: read it from {VERSION_FILE}"
        assert config["project"]["dynamic"] == ["version"]
        path = (pyproject.parent / config["tool"]["hatch"]["version"]["path"]).resolve()
        assert path == (ROOT / VERSION_FILE).resolve(), pyproject
    assert spyre_runtime.__version__ is __version__  # re-exported by spyre_operator
    chart = yaml.safe_load((ROOT / "charts" / "spyre-operator" / "Chart.yaml").read_text())
    assert chart["version"] == chart["appVersion"] == __version__, (
        f"charts/spyre-operator/Chart.yaml: version and appVersion must be {__version__} "
        f"({VERSION_FILE})"
    )
    (image,) = yaml.safe_load(chart["annotations"]["artifacthub.io/images"])
    assert image["image"] == f"{release.DEFAULT_REGISTRY}/operator:{__version__}"


@pytest.mark.parametrize(
    ("text", "host", "path", "chart"),
    [
        ("quay.io/spyre-serving", "quay.io", "spyre-serving", "oci://quay.io/spyre-serving/charts"),
        ("127.0.0.1:5000", "127.0.0.1:5000", "", "oci://127.0.0.1:5000/charts"),
        ("reg.example.com:443/a/b/", "reg.example.com:443", "a/b", "oci://reg.example.com:443/a/b/charts"),
    ],
)  # fmt: skip
def test_registry_is_host_port_and_path(text: str, host: str, path: str, chart: str) -> None:
    target = Target.parse(text)
    assert (target.host, target.path, target.chart_url()) == (host, path, chart)
    assert target.repository("operator") == f"{text.rstrip('/')}/operator"


@pytest.mark.parametrize("text", ["https://quay.io/x", "quay.io/x:1.0", "Quay.io/X", ""])
def test_a_registry_with_a_scheme_tag_or_capitals_is_refused(text: str) -> None:
    with pytest.raises(ReleaseError, match="is not host\\[:port\\]\\[/path\\]"):
        Target.parse(text)


def test_the_version_must_be_the_projects() -> None:
    assert release.check_version(f"v{__version__}") == __version__
    assert release.check_version(__version__) == __version__
    with pytest.raises(ReleaseError, match=f"not the project's version {__version__}.*bump it"):
        release.check_version("v99.0.0")


def test_an_unknown_platform_is_refused_before_anything_is_built(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = [__version__, "quay.io/spyre-serving", "--platforms", "amd64,mips"]
    assert release.main(argv) == 1
    assert "unknown platform 'mips': use a comma-separated list of amd64, arm64" in (
        capsys.readouterr().err
    )


def test_a_refused_release_says_why_and_builds_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    assert release.main(["v99.0.0", "quay.io/spyre-serving"]) == 1
    assert "VERSION v99.0.0 is not the project's version" in capsys.readouterr().err
    assert release.main([__version__, "quay.io/x", "--flavours", "vllm"]) == 1
    assert "--flavours vllm: not one of" in capsys.readouterr().err


def test_the_workflow_runs_exactly_the_release_script_on_a_version_tag() -> None:
    workflow = yaml.safe_load((ROOT / ".github" / "workflows" / "release.yml").read_text())
    assert workflow[True] == {"push": {"tags": ["v*"]}}  # YAML 1.1 reads `on` as True
    (job,) = workflow["jobs"].values()
    runs = [step["run"] for step in job["steps"] if "run" in step]
    assert runs[-1] == 'scripts/release "$GITHUB_REF_NAME" "$RELEASE_REGISTRY"'
    assert set(job["steps"][-1]["env"]) == {
        release.USERNAME_ENV,
        release.PASSWORD_ENV,
        "RELEASE_REGISTRY",
    }
    script = (ROOT / "scripts" / "release").read_text()
    assert script.rstrip().endswith('exec python -m spyre_devcluster.release "$@"')


def test_a_serving_architecture_a_flavour_lacks_is_refused_before_anything_is_built(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = [__version__, "quay.io/x", "--flavours", "vllm-spyre", "--serving-platforms", "arm64"]
    assert release.main(argv) == 1
    assert "no vllm-spyre CPU serving image for arm64: it is built for amd64 (PyPI" in (
        capsys.readouterr().err
    )


def test_the_packaged_charts_defaults_name_images_the_release_pushes() -> None:
    values = (ROOT / "charts" / "spyre-operator" / "values.yaml").read_text()
    packaged = yaml.safe_load(release.packaged_text(values, Target.parse("reg:5000/rel")))
    assert packaged["image"]["repository"] == "reg:5000/rel/operator"
    # the CPU serving image, under the tags the operator renders (build_serving's)
    assert packaged["runtimeImage"]["repository"] == "reg:5000/rel/runtime-cpu"
    # and no card image: a card model without spec.image is refused, not given a CPU image
    assert packaged["runtimeImage"]["cards"] is False
    assert yaml.safe_load(values)["runtimeImage"]["cards"] is True
