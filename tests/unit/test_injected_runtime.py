"""The runtime brought to an image without it (render/inject.py, spyre_runtime/inject.py,
spyre_runtime/imagesetup.py): rendered pods, and the copy run by another interpreter."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from apilib import COMMIT, ROOT, pinned, with_spec

from spyre_operator.api import runtimes as rt
from spyre_operator.api.validation import SpyreModel, parse
from spyre_operator.cli import main
from spyre_operator.render.children import build_cleanup_job, desired
from spyre_runtime import contract, imagesetup

pytestmark = pytest.mark.unit

IBM = "quay.io/ibm-aiu/sendnn-inference:2.6.3.amd64"
INJECTOR = "registry.example.com/spyre-serving/operator:0.1.0"
IMAGES = rt.RuntimeImages(injector=INJECTOR)


def _model(profile: str) -> SpyreModel:
    image = IBM if profile != "spyre-serving" else "example.com/me/runtime:1"
    spec = {"image": image, "runtime": {"imageProfile": profile}}
    return parse(pinned(with_spec(spec)), "ns")


def _pods(model: SpyreModel) -> dict[str, dict[str, Any]]:
    want = desired(model, "u-1", images=IMAGES)
    assert want.weights is not None and want.job is not None and want.deployment is not None
    objects = {"weights": want.weights, "precompile": want.job, "serve": want.deployment}
    objects["clean"] = build_cleanup_job(model, "u-1", images=IMAGES)
    return {role: obj["spec"]["template"]["spec"] for role, obj in objects.items()}


def test_every_pod_of_an_upstream_image_runs_the_injected_runtime() -> None:
    own, injected = _pods(_model("spyre-serving")), _pods(_model("sendnn-inference"))
    for role, pod in injected.items():
        (init,) = pod["initContainers"]
        assert init["image"] == INJECTOR
        assert init["command"] == ["python3", "-m", "spyre_runtime.inject", rt.RUNTIME_DIR]
        (container,) = pod["containers"]
        assert container["image"] == IBM
        assert container["command"] == ["python3", "-m", "spyre_runtime"]
        # the same role and vLLM arguments as the operator's own image gets
        assert container["args"] == own[role]["containers"][0]["args"]
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env[rt.PYTHONPATH] == rt.RUNTIME_DIR
        assert env[contract.SPYRE_SERVING_IMAGE_HOME] == "/home/senuser"
        mount = {"name": "spyre-runtime", "mountPath": rt.RUNTIME_DIR, "readOnly": True}
        assert mount in container["volumeMounts"]
        assert {"name": "spyre-runtime", "emptyDir": {}} in pod["volumes"]
    for pod in own.values():  # the operator's own image: as before, nothing injected
        assert "initContainers" not in pod and "command" not in pod["containers"][0]


@pytest.mark.parametrize(
    ("image", "profile", "flavour", "home"),
    [(IBM, "sendnn-inference", "sendnn-inference", "/home/senuser"),
     ("registry.redhat.io/rhaiis/vllm-spyre-rhel9:3.2.2", "openshift-ai", "vllm-spyre",
      "/home/vllm")],
)  # fmt: skip
def test_the_senlib_config_is_copied_from_the_familys_user_home(
    image: str, profile: str, flavour: str, home: str
) -> None:
    """IBM's Spyre base images keep it in senuser's home, Red Hat's UBI images in vllm's."""
    spec = {"image": image, "runtime": {"imageProfile": profile, "flavour": flavour}}
    model = parse(pinned(with_spec(spec)), "ns")
    for pod in _pods(model).values():
        env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
        assert env[contract.SPYRE_SERVING_IMAGE_HOME] == home


def test_the_init_container_follows_the_pull_policy() -> None:
    spec = {"image": IBM, "runtime": {"imageProfile": "sendnn-inference"}}
    model = parse(pinned(with_spec({**spec, "imagePullPolicy": "Always"})), "ns")
    for pod in _pods(model).values():
        assert pod["initContainers"][0]["imagePullPolicy"] == "Always"
    assert "imagePullPolicy" not in _pods(_model("sendnn-inference"))["serve"]["initContainers"][0]


def test_users_cannot_undo_the_injection() -> None:
    for name in (rt.PYTHONPATH, contract.SPYRE_SERVING_IMAGE_HOME):
        assert rt.is_reserved_env(name)


@pytest.mark.parametrize(
    ("repository", "injector"),
    [
        ("quay.io/spyre-serving/runtime", "quay.io/spyre-serving/operator:0.1.0"),
        ("reg:5000/rel/runtime-cpu", "reg:5000/rel/operator:0.1.0"),  # a release's
        ("runtime", "operator:0.1.0"),
    ],
)
def test_the_operators_image_is_found_beside_the_serving_images(
    repository: str, injector: str
) -> None:
    assert rt.RuntimeImages(repository).injector_image == injector
    assert rt.RuntimeImages(repository, injector=INJECTOR).injector_image == INJECTOR


def test_the_injector_image_is_checked() -> None:
    with pytest.raises(ValueError, match="is not an image reference"):
        rt.RuntimeImages(injector="Not An Image")


def test_the_injected_plugin_entry_point_is_the_distributions() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    plugins = config["project"]["entry-points"][contract.PLUGIN_GROUP]
    name, _, value = contract.PLUGIN_ENTRY.partition(" = ")
    assert plugins == {name: value}


def _run(python: str, args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([python, *args], env=env, capture_output=True, text=True, check=False)


def test_the_copy_runs_on_another_interpreter_without_site_packages(tmp_path: Path) -> None:
    """The init container's command in this venv, then the copy alone (python -S: no
    site-packages, standard library only) as the pod runs it: it imports, finds its vLLM
    plugin entry point, reads a compile Job's env and prints the vLLM command."""
    dest = tmp_path / "runtime"
    done = _run(sys.executable, ["-m", "spyre_runtime.inject", str(dest)], dict(os.environ))
    assert done.returncode == 0, done.stderr
    model = _model("sendnn-inference")
    (container,) = _pods(model)["precompile"]["containers"]
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    env |= {rt.PYTHONPATH: str(dest), "HOME": str(tmp_path), "PATH": os.environ["PATH"]}
    found = (
        "import importlib.metadata as m, spyre_runtime;"
        f"print(spyre_runtime.__file__, *m.entry_points(group={contract.PLUGIN_GROUP!r}))"
    )
    for python in {sys.executable, "/usr/bin/python3"}:
        if not Path(python).exists():
            continue
        done = _run(python, ["-S", "-c", found], env)
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith(str(dest / "spyre_runtime"))
        assert "spyre_runtime.compilereport:register" in done.stdout
        done = _run(python, ["-S", "-m", "spyre_runtime", "describe", *container["args"][1:]], env)
        assert done.returncode == 0, done.stderr
        assert "flavour: sendnn-inference (VLLM_PLUGINS=sendnn_inference" in done.stdout
        assert "serve /models/ibm-granite/granite-3.3-8b-instruct --tensor" in done.stdout


def test_image_setup_copies_the_senlib_config_and_sources_the_device_script(
    tmp_path: Path,
) -> None:
    image_home, home = tmp_path / "senuser", tmp_path / "home"
    image_home.mkdir()
    home.mkdir()
    (image_home / ".senlib.json").write_text('{"GENERAL": {}}')
    script = tmp_path / "ibm-aiu-setup.sh"
    # as the base image's: exports from the device plugin's variables; a failing command
    # in it does not stop the rest
    script.write_text(
        "cp /nonexistent /etc/aiu/ 2>/dev/null\n"
        'export AIU_WORLD_SIZE=2 AIU_WORLD_RANK_0="${PCIDEVICE_IBM_COM_SPYRE_PF%%,*}"\n'
    )
    environ = {
        "HOME": str(home),
        contract.SPYRE_SERVING_IMAGE_HOME: str(image_home),
        "PCIDEVICE_IBM_COM_SPYRE_PF": "0000:1a:00.0,0000:1b:00.0",
        "PATH": os.environ["PATH"],
    }
    imagesetup.prepare(environ, script)
    assert (home / ".senlib.json").read_text() == '{"GENERAL": {}}'
    assert environ["AIU_WORLD_SIZE"] == "2"
    assert environ["AIU_WORLD_RANK_0"] == "0000:1a:00.0"
    assert not imagesetup.SHELL_OWN & environ.keys()
    # an image without the script or the config: nothing to do, nothing fails
    bare = {"HOME": str(home), contract.SPYRE_SERVING_IMAGE_HOME: str(tmp_path / "none")}
    imagesetup.prepare(bare, tmp_path / "missing.sh")
    assert bare.keys() == {"HOME", contract.SPYRE_SERVING_IMAGE_HOME}


def test_render_takes_the_operators_image_for_the_injection(
    capsys: pytest.CaptureFixture[str],
) -> None:
    example = str(ROOT / "examples" / "granite-3.3-8b-ibm-image.yaml")
    assert main(["render", example, "--runtime-injector-image", INJECTOR, "--commit", COMMIT]) == 0
    pods = [
        d["spec"]["template"]["spec"]
        for d in yaml.safe_load_all(capsys.readouterr().out)
        if d["kind"] in ("Job", "Deployment")
    ]
    assert [p["initContainers"][0]["image"] for p in pods] == [INJECTOR] * 3
    assert main(["render", example, "--runtime-injector-image", "Not An Image"]) == 2
    assert "'Not An Image' is not an image reference" in capsys.readouterr().err


def _dist(site: Path, name: str, version: str) -> None:
    """An installed distribution as importlib.metadata finds it (its dist-info only)."""
    info = site / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


@pytest.mark.parametrize(
    ("installed", "message"),
    [
        ([], "has no vLLM: name a vLLM-Spyre image in spec.image"),
        ([("vllm", "0.28.0")], "has no vLLM-Spyre plugin (sendnn_inference): name a "
         "sendnn-inference image"),
        ([("vllm", "0.17.1"), ("vllm_spyre", "1.10.0")], "has the vllm-spyre plugin 1.10.0, "
         "not sendnn-inference: set spec.runtime.flavour: vllm-spyre (and its "
         "runtime.imageProfile)"),
        ([("vllm", "0.25.0"), ("sendnn_inference", "2.5.2")], "has sendnn_inference 2.5.2, the "
         "SpyreModel declares 2.6.3: set spec.runtime.version: 2.5.2 (it is part of the cache "
         "key and the catalog)"),
    ],
)  # fmt: skip
def test_an_image_that_cannot_run_the_command_is_refused_with_what_to_set(
    installed: list[tuple[str, str]], message: str, tmp_path: Path
) -> None:
    """The injected copy's precompile in an interpreter whose packages are only the ones
    given (python -S, their dist-info on PYTHONPATH): the summary the operator shows."""
    dest, site = tmp_path / "runtime", tmp_path / "site"
    site.mkdir()
    assert _run(sys.executable, ["-m", "spyre_runtime.inject", str(dest)], dict(os.environ))
    for name, version in installed:
        _dist(site, name, version)
    (container,) = _pods(_model("sendnn-inference"))["precompile"]["containers"]
    summary = tmp_path / "termination-log"
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e} | {
        rt.PYTHONPATH: f"{dest}:{site}",
        contract.SPYRE_SERVING_TERMINATION_LOG: str(summary),
        "HOME": str(tmp_path),
        "PATH": os.environ["PATH"],
    }
    done = _run(sys.executable, ["-S", "-m", "spyre_runtime", *container["args"]], env)
    assert done.returncode == 2, done.stderr
    written = json.loads(summary.read_text())
    assert written["reason"] == contract.IMAGE_UNUSABLE
    assert written["message"].startswith(f"the image's Python ({sys.executable}) ")
    assert written["message"].endswith(message)


def test_a_python_too_old_is_refused_with_the_same_summary(tmp_path: Path) -> None:
    """The check before anything else is imported (in the oldest syntax): an image whose
    Python is 3.9 ends with exit 2 and an ImageUnusable summary, the message on stderr."""
    dest = tmp_path / "runtime"
    assert _run(sys.executable, ["-m", "spyre_runtime.inject", str(dest)], dict(os.environ))
    summary = tmp_path / "termination-log"
    env = {
        rt.PYTHONPATH: str(dest),
        contract.SPYRE_SERVING_TERMINATION_LOG: str(summary),
        "PATH": os.environ["PATH"],
    }
    older = (
        "import runpy, sys; sys.version_info = (3, 9, 2); "
        "runpy.run_module('spyre_runtime', run_name='__main__')"
    )
    done = _run(sys.executable, ["-S", "-c", older, "precompile"], env)
    assert done.returncode == 2
    said = (
        f"the image's Python ({sys.executable}) is 3.9.2: spyre-runtime needs 3.11 or later: "
        "name a vLLM-Spyre image with a newer Python in spec.image"
    )
    assert json.loads(summary.read_text()) == {
        "ok": False,
        "reason": contract.IMAGE_UNUSABLE,
        "message": said,
    }
    assert done.stderr.strip() == said
    # the literals __main__ cannot import (contract.py needs 3.11) are the contract's
    main_text = (dest / "spyre_runtime" / "__main__.py").read_text()
    names = (contract.SPYRE_SERVING_TERMINATION_LOG, contract.DEFAULT_TERMINATION_LOG)
    for value in (*names, contract.IMAGE_UNUSABLE):
        assert f'"{value}"' in main_text


def test_only_the_weights_pod_reaches_the_hub_whatever_the_images_env() -> None:
    """Red Hat's images set HF_HUB_OFFLINE=1 in their ENV; the pods' env wins over it."""
    pods = _pods(_model("sendnn-inference"))
    offline = {
        role: {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}.get(
            rt.HF_HUB_OFFLINE
        )
        for role, pod in pods.items()
    }
    assert offline == {"weights": "0", "precompile": "1", "serve": "1", "clean": None}


def test_the_injected_start_logs_what_the_image_setup_sourced(tmp_path: Path) -> None:
    """Found on the node with the UBI-like stand-in: the setup ran before logging was set
    up, so the pod's log never said the device script was sourced."""
    script = tmp_path / "ibm-aiu-setup.sh"
    script.write_text("export AIU_WORLD_SIZE=1\n")
    start = (
        "import pathlib, sys; from spyre_runtime import imagesetup, injected;"
        f"imagesetup.prepare.__defaults__ = (imagesetup.os.environ, pathlib.Path({str(script)!r}));"
        "sys.exit(injected.main(['describe']))"
    )  # (describe then refuses the empty environment: after the setup, which is what counts)
    done = _run(sys.executable, ["-c", start], {"PATH": os.environ["PATH"], "HOME": str(tmp_path)})
    assert f"spyre-runtime INFO sourced {script}: AIU_WORLD_SIZE" in done.stderr
