"""A private containerd for the image tests and the image benchmark.

Its own root, state and socket in a folder; the CRI settings a node on this kind of VM
needs (`restrict_oom_score_adj`: the VM lacks CAP_SYS_RESOURCE) and the local pause image.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

from spyre_devcluster.images.recipes import PAUSE
from spyre_devcluster.simulate import poll_until

CONFIG = """version = 2
root = "{dir}/root"
state = "{dir}/state"
[grpc]
  address = "{dir}/containerd.sock"
[plugins."io.containerd.grpc.v1.cri"]
  restrict_oom_score_adj = true
  sandbox_image = "{pause}"
  [plugins."io.containerd.grpc.v1.cri".cni]
    conf_dir = "{dir}/cni"
"""

# garbage collection after every change, as a busy containerd collects at any moment
EAGER_GC = """
[plugins."io.containerd.gc.v1.scheduler"]
  mutation_threshold = 1
  deletion_threshold = 1
  schedule_delay = "0s"
"""


def ensure_containerd() -> None:
    if shutil.which("containerd") and shutil.which("runc"):
        return
    subprocess.run(["apt-get", "update", "-qq"], check=False)
    subprocess.run(
        ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "containerd", "runc"],
        check=True,
        env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
    )


@contextlib.contextmanager
def private_containerd(folder: Path, eager_gc: bool = False) -> Iterator[str]:
    """Run containerd from folder until the block ends; yields its socket path."""
    ensure_containerd()
    folder.mkdir(parents=True, exist_ok=True)
    config = CONFIG.format(dir=folder, pause=PAUSE) + (EAGER_GC if eager_gc else "")
    (folder / "config.toml").write_text(config)
    socket = str(folder / "containerd.sock")
    with (folder / "containerd.log").open("w") as log:
        proc = subprocess.Popen(
            ["containerd", "--config", str(folder / "config.toml")], stdout=log, stderr=log
        )

    def answers() -> bool:
        assert proc.poll() is None, (folder / "containerd.log").read_text()[-2000:]
        return not subprocess.run(["ctr", "-a", socket, "version"], capture_output=True).returncode

    try:
        poll_until(answers, "containerd answers", 30)
        yield socket
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        shutil.rmtree(folder, ignore_errors=True)
