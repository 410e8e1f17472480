"""What the hostile inputs cost to answer (not a test: tests/unit/test_api_hostile.py checks
what they answer, with only a hang guard), each beside a yardstick: the same check of a
plain spec (tests/unit/apilib.py's BASE in memory, examples/micro-granite-cpu.yaml as a
file).

    .venv/bin/python benchmarks/hostile_bench.py [--repeat 20]

Prints, per input, the median seconds of --repeat runs, the yardstick's and their ratio:
an alias bomb built in memory (9**10 leaves, shared) through `validate`; each hostile YAML
document (nested 600 deep, a 5000-digit integer, an alias bomb, ...) through
`spyre-operator validate` and `render`; each image reference that backtracks a naive
pattern through `validate`. Each took milliseconds on the 2-core VM; the naive walk or
pattern each is there for takes hours.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "unit"))
from apilib import BASE, HOSTILE_YAML, IMAGE_REFERENCES, alias_bomb, with_spec  # noqa: E402

from spyre_operator.api.validation import validate  # noqa: E402
from spyre_operator.cli import main  # noqa: E402

PLAIN_FILE = (ROOT / "examples" / "micro-granite-cpu.yaml").read_text()


def median_seconds(check: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        check()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def command(name: str, text: str, folder: Path) -> Callable[[], object]:
    """`spyre-operator NAME file` on the text, its output swallowed."""
    path = folder / "model.yaml"

    def run() -> object:
        path.write_text(text)
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            return main([name, str(path)])

    return run


def rows(folder: Path) -> list[tuple[str, Callable[[], object], Callable[[], object]]]:
    """(what, the hostile check, its yardstick)."""
    plain = partial(validate, BASE)
    bomb = with_spec({"nodeSelector": {"a": alias_bomb()}})
    found: list[tuple[str, Callable[[], object], Callable[[], object]]] = [
        ("validate: an alias bomb in memory", partial(validate, bomb), plain)
    ]
    for name in ("validate", "render"):
        for what, (text, _) in HOSTILE_YAML.items():
            yardstick = command(name, PLAIN_FILE, folder)
            found.append((f"{name}: {what}", command(name, text, folder), yardstick))
    for image in IMAGE_REFERENCES:
        what = f"validate: image {image[:6]}... ({len(image)})"
        found.append((what, partial(validate, with_spec({"image": image})), plain))
    return found


def main_bench() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        print(f"{'input':48} {'median':>9} {'yardstick':>10} {'ratio':>7}")
        for what, check, yardstick in rows(Path(folder)):
            took = median_seconds(check, args.repeat)
            plain = median_seconds(yardstick, args.repeat)
            print(f"{what:48} {took * 1000:7.2f}ms {plain * 1000:8.2f}ms {took / plain:6.1f}x")


if __name__ == "__main__":
    main_bench()
