"""How long the node's images take to build and import, cold and cached (a script, not a test).

    .venv/bin/python benchmarks/image_bench.py [IMAGE ...]     (default: all three; root)

Cold: builds into an empty image folder ($SPYRE_SERVING_IMAGES pointed at a temp dir;
the runtime venvs stay where scripts/runtime-env put them) and imports into a fresh
private containerd. Cached: the same calls again (found by their input keys; the
importer finds the same image and does nothing). Prints seconds, image sizes and the
disk each step leaves behind.

Yardsticks, measured in the same run on the same bytes: `tar | sha256sum` of the image's
layer folders (the least any builder does: read and hash every byte) beside the cold
build, and `cp -a` of those folders onto the same disk (one plain write of every byte;
containerd writes the content blob and then unpacks it) beside the cold import.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "images"))
from ctdlib import private_containerd

from spyre_devcluster.images import recipes
from spyre_devcluster.images.containerd import import_image

DEFAULT = ["pause", "operator", "runtime-cpu"]


def disk(path: Path) -> str:
    out = subprocess.run(["du", "-sh", str(path)], capture_output=True, text=True, check=False)
    return out.stdout.split()[0] if out.stdout else "?"


def shell_seconds(script: str, *args: str) -> float:
    started = time.monotonic()
    subprocess.run(["bash", "-c", script, "bench", *args], check=True)
    return time.monotonic() - started


def hash_seconds(image: recipes.Image) -> float:
    """Yardstick: read and hash every byte of the image's layers."""
    dirs = [str(layer.dir) for layer in image.layers]
    script = 'for d in "$@"; do tar -C "$d" -cf - .; done | sha256sum >/dev/null'
    return shell_seconds(script, *dirs)


def copy_seconds(image: recipes.Image, scratch: Path) -> float:
    """Yardstick: one plain copy of the image's layers onto the same disk."""
    dirs = [str(layer.dir) for layer in image.layers]
    scratch.mkdir()
    script = 'to=$1; shift; i=0; for d in "$@"; do i=$((i+1)); cp -a "$d" "$to/$i"; done'
    try:
        return shell_seconds(script, str(scratch), *dirs)
    finally:
        subprocess.run(["rm", "-rf", str(scratch)], check=True)


def timed(names: list[str]) -> list[tuple[recipes.Image, float]]:
    results = []
    for name in names:
        started = time.monotonic()
        (image,) = recipes.build_images([name])
        results.append((image, time.monotonic() - started))
        print(f"build {name}: {results[-1][1]:.1f}s", flush=True)
    return results


def main() -> int:
    names = sys.argv[1:] or DEFAULT
    with tempfile.TemporaryDirectory(prefix="image-bench-", dir=Path.home()) as tmp:
        os.environ["SPYRE_SERVING_IMAGES"] = str(Path(tmp) / "images")
        rows = []
        cold = timed(names)
        cached = timed(names)
        print(f"images folder after the cold builds: {disk(Path(tmp) / 'images')}")
        for (image, _), (again, _) in zip(cold, cached, strict=True):
            if again.key != image.key:
                print(f"note: {image.name} was rebuilt: its sources changed during the run")
        with private_containerd(Path(tmp) / "containerd") as socket:
            for (_, cold_s), (image, cached_s) in zip(cold, cached, strict=True):
                first = import_image(image, socket)
                repeat = import_image(image, socket)
                hashed = hash_seconds(image)
                copied = copy_seconds(image, Path(tmp) / "copy")
                rows.append(
                    (image, cold_s, hashed, cached_s, first.seconds, copied, repeat.seconds)
                )
            print(f"containerd root after the imports: {disk(Path(tmp) / 'containerd' / 'root')}")
    print(
        f"\n{'image':58} {'size':>8} {'build':>8} {'(hash)':>7} {'cached':>7} "
        f"{'import':>7} {'(copy)':>7} {'again':>6}"
    )
    for image, build_s, hash_s, cached_s, import_s, copy_s, again_s in rows:
        print(
            f"{image.name:58} {image.size / 1e9:7.2f}G {build_s:7.1f}s {hash_s:6.1f}s "
            f"{cached_s:6.1f}s {import_s:6.1f}s {copy_s:6.1f}s {again_s:5.1f}s"
        )
    print("(hash): tar | sha256sum of the layers; (copy): cp -a of the layers; same run")
    return 0


if __name__ == "__main__":
    sys.exit(main())
