"""Import built images into a containerd (`ctr images import -`), streaming.

The OCI archive is written straight into ctr's stdin: no temporary tar, whatever the
layer size. Layers whose unpacked snapshot containerd already has are left out of the
archive (unpacking skips them), so changing the small top layer of a 12 GB image
imports in seconds. Those snapshots are kept from garbage collection while the import
runs: the import moves the image's name to the new manifest before unpacking it, and a
collection in between would delete the old version's layers the new one builds on.
After unpacking, big layer blobs are removed from the content store:
the snapshot is what containers run from, and it halves the disk the image takes.

With `link=True` (a further node's store, which would otherwise take the serving image's
9 GB again, 18 GB at the peak of an import) the layers containerd lacks are not sent at
all: each becomes a snapshot whose tree is hard-linked from the cached layer (already laid
out as overlayfs's upper folder), and the import leaves them out like any unpacked layer.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from spyre_devcluster.images.oci import Manifest, chain_ids, write_archive
from spyre_devcluster.images.store import Image, ImageBuildError

NAMESPACE = "k8s.io"  # where the kubelet's CRI plugin looks
SNAPSHOTTER = "overlayfs"
DROP_BLOBS_OVER = 64 << 20
GC_ROOT = "containerd.io/gc.root"  # a label that makes a snapshot a collection root


@dataclass(frozen=True)
class Imported:
    name: str
    digest: str
    streamed: int  # bytes of layers sent
    skipped: int  # layers already unpacked there
    seconds: float
    already: bool  # the same image was there: nothing done


class Ctr:
    """ctr bound to one containerd socket and namespace."""

    def __init__(self, address: str, namespace: str = NAMESPACE, ctr: Path | None = None) -> None:
        """`ctr`: the client of that containerd's version (the node's own build); else
        the one on PATH."""
        found = str(ctr) if ctr else shutil.which("ctr")
        if found is None:
            raise ImageBuildError("ctr not found: apt-get install containerd")
        self.base = [found, "--address", address, "--namespace", namespace]

    def cmd(self, *args: str) -> list[str]:
        return [*self.base, *args]

    def run(self, *args: str) -> str:
        out = subprocess.run(self.cmd(*args), capture_output=True, text=True, check=False)
        if out.returncode != 0:
            raise ImageBuildError(f"`ctr {' '.join(args)}` failed: {out.stderr.strip()}")
        return out.stdout

    def images(self) -> dict[str, str]:
        """name -> manifest digest of every image record."""
        rows = (line.split() for line in self.run("images", "ls").splitlines()[1:])
        return {words[0]: words[2] for words in rows if len(words) > 2}

    def image_digest(self, name: str) -> str | None:
        return self.images().get(name)

    def collect_garbage(self) -> None:
        """A lease deleted with --sync runs containerd's garbage collection now, so freed
        disk is free when this returns (otherwise it waits for a later collection)."""
        lease = f"spyre-images-{os.getpid()}"
        self.run("leases", "create", "--id", lease)
        self.run("leases", "delete", "--sync", lease)

    def snapshots(self) -> set[str]:
        out = self.run("snapshots", "--snapshotter", SNAPSHOTTER, "ls")
        return {line.split()[0] for line in out.splitlines()[1:] if line.strip()}

    @contextlib.contextmanager
    def kept(self, snapshot: str | None) -> Iterator[None]:
        """Keep snapshot and its parents from garbage collection for the block."""
        if snapshot is None:
            yield
            return
        label = ("snapshots", "--snapshotter", SNAPSHOTTER, "label", snapshot)
        self.run(*label, f"{GC_ROOT}=spyre-import")
        try:
            yield
        finally:
            self.run(*label, f"{GC_ROOT}=")  # an empty value removes the label


def import_image(
    image: Image,
    address: str,
    namespace: str = NAMESPACE,
    ctr: Path | None = None,
    link: bool = False,
) -> Imported:
    """Make image available under its name in the containerd at address (through the
    `ctr` client given, else the one on PATH); `link`: its missing layers hard-linked
    (link_layers), not sent."""
    started = time.monotonic()
    client = Ctr(address, namespace, ctr)
    linked = link_layers(image, client) if link else []
    try:
        return _import(image, client, started)
    finally:
        for snapshot in linked:  # the image keeps them now
            client.run("snapshots", "--snapshotter", SNAPSHOTTER, "label", snapshot, f"{GC_ROOT}=")


def _import(image: Image, client: Ctr, started: float) -> Imported:
    manifest = image.manifest
    have = client.snapshots()
    chains = chain_ids(manifest.layers)
    previous = client.image_digest(image.name)
    if previous == manifest.digest and chains[-1] in have:
        return Imported(image.name, manifest.digest, 0, 0, time.monotonic() - started, True)
    skip = frozenset(
        b.digest for b, chain in zip(manifest.layers, chains, strict=True) if chain in have
    )
    dirs = {layer.blob.digest: layer.dir for layer in image.layers}
    # chain ids are cumulative: the deepest one there stands for all the layers below it
    deepest = next((c for c in reversed(chains) if c in have), None)
    with client.kept(deepest):
        stream(client, image.name, manifest, dirs, skip)
    if client.image_digest(image.name) != manifest.digest:
        raise ImageBuildError(f"{image.name} is not in containerd after the import")
    sent = [b for b in manifest.layers if b.digest not in skip]
    dropped = [b.digest for b in sent if b.size > DROP_BLOBS_OVER]
    if dropped:
        client.run("content", "rm", *dropped)
    # The CRI plugin keeps a record named after the config digest of every image it saw;
    # the replaced version's record would keep its layers (GBs) for ever.
    stale = [n for n, d in client.images().items() if d == previous and n.startswith("sha256:")]
    if stale:
        client.run("images", "rm", *stale)
    if dropped or stale:
        client.collect_garbage()
    return Imported(
        image.name,
        manifest.digest,
        sum(b.size for b in sent),
        len(skip),
        time.monotonic() - started,
        False,
    )


def link_layers(image: Image, client: Ctr) -> list[str]:
    """Snapshots of the image's layers that containerd lacks, their trees hard-linked
    from the cached layers (copied where the store is on another filesystem); each is a
    collection root until the caller removes the label. Returns their names."""
    snapshots = ("snapshots", "--snapshotter", SNAPSHOTTER)
    have = client.snapshots()
    linked: list[str] = []
    parent: list[str] = []
    for layer, chain in zip(image.layers, chain_ids(image.manifest.layers), strict=True):
        if chain not in have:
            active = f"spyre-link-{chain}"
            mounts = json.loads(client.run(*snapshots, "prepare", "--mounts", active, *parent))
            client.run(*snapshots, "label", active, f"{GC_ROOT}=spyre-link")
            try:
                _link_tree(layer.dir, _upper_dir(mounts))
                client.run(*snapshots, "commit", chain, active)
            except BaseException:
                with contextlib.suppress(ImageBuildError):
                    client.run(*snapshots, "rm", active)
                raise
            client.run(*snapshots, "label", chain, f"{GC_ROOT}=spyre-link")
            linked.append(chain)
        parent = [chain]
    return linked


def _upper_dir(mounts: list[dict[str, object]]) -> Path:
    """Where an active overlayfs snapshot's files go: its upper folder, or the folder
    bound for a snapshot without parent."""
    (mount,) = mounts
    fields = {key.lower(): value for key, value in mount.items()}
    options = [str(o) for o in fields.get("options") or []]  # type: ignore[attr-defined]
    upper = [o.removeprefix("upperdir=") for o in options if o.startswith("upperdir=")]
    return Path(upper[0] if upper else str(fields["source"]))


def _link_tree(source: Path, target: Path) -> None:
    for cmd in (["cp", "-al"], ["cp", "-a"]):  # hard links need one filesystem
        done = subprocess.run([*cmd, f"{source}/.", f"{target}/"], capture_output=True, text=True)
        if done.returncode == 0:
            return
    raise ImageBuildError(f"copying the layer {source} into {target} failed: {done.stderr}")


def stream(
    ctr: Ctr, name: str, manifest: Manifest, dirs: dict[str, Path], skip: frozenset[str]
) -> None:
    """Pipe the image's archive, without the layers in skip, into `ctr images import`."""
    proc = subprocess.Popen(
        ctr.cmd("images", "import", "--snapshotter", SNAPSHOTTER, "-"),
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    assert proc.stdin is not None and proc.stderr is not None
    try:
        write_archive(proc.stdin, manifest, dirs, skip)  # type: ignore[arg-type]
        proc.stdin.close()
    except BrokenPipeError:
        pass
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    err = proc.stderr.read().decode()
    if proc.wait() != 0:
        raise ImageBuildError(f"ctr images import of {name} failed: {err.strip()}")
