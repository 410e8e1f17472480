"""What an upstream image's entrypoint does before vLLM, for the injected runtime.

The operator replaces the image's entrypoint with `python3 -m spyre_runtime` (its own
image's entrypoint, image/entrypoint, does the same in bash): the senlib config the image
keeps in its user's home is copied into the pod's HOME (an emptyDir), and the Spyre base
image's device setup script (AIU_WORLD_SIZE, AIU_WORLD_RANK_<n> from the cards the device
plugin gave the pod) is sourced, its exported variables taken into this process.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import MutableMapping
from pathlib import Path

from .contract import SPYRE_SERVING_IMAGE_HOME
from .report import log

SETUP_SCRIPT = Path("/etc/profile.d/ibm-aiu-setup.sh")
SENLIB_CONFIG = ".senlib.json"
SHELL_OWN = frozenset({"_", "SHLVL", "PWD", "OLDPWD"})  # the shell sets these itself


def copy_senlib_config(environ: MutableMapping[str, str]) -> None:
    source = Path(environ.get(SPYRE_SERVING_IMAGE_HOME, "/home/senuser")) / SENLIB_CONFIG
    home = environ.get("HOME")
    if not home or not source.is_file() or source.parent == Path(home):
        return
    try:
        shutil.copyfile(source, Path(home) / SENLIB_CONFIG)
    except OSError as err:
        log.warning("cannot copy %s to HOME=%s: %s", source, home, err)


def sourced_env(script: Path, environ: MutableMapping[str, str]) -> dict[str, str]:
    """The environment after sourcing `script` in a shell (its output goes to stderr; a
    failing command in it does not stop the rest, as in the image's entrypoint)."""
    shell = shutil.which("bash") or "/bin/sh"
    command = f'. "{script}" 1>&2; exec env -0'
    done = subprocess.run(
        [shell, "-c", command], env=dict(environ), stdout=subprocess.PIPE, check=False
    )
    pairs = (entry.split("=", 1) for entry in done.stdout.decode().split("\0") if "=" in entry)
    return dict(pairs)


def prepare(environ: MutableMapping[str, str] = os.environ, script: Path = SETUP_SCRIPT) -> None:
    copy_senlib_config(environ)
    if script.is_file():
        after = sourced_env(script, environ)
        changed = {k: v for k, v in after.items() if environ.get(k) != v and k not in SHELL_OWN}
        log.info("sourced %s: %s", script, " ".join(sorted(changed)) or "no change")
        environ.update(changed)
