"""benchmarks/cache_effect.py's start-up breakdown: the phases between the milestones of a
serving pod's timestamped log (the node run is the benchmark's, docs/node.md)."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from apilib import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
import cache_effect

pytestmark = pytest.mark.unit

T0 = datetime(2026, 11, 26, 8, 0, 0, tzinfo=UTC).timestamp()


def stamped(seconds: float, text: str) -> str:
    at = datetime.fromtimestamp(T0 + seconds, UTC)
    return f"{at.strftime('%Y-%m-%dT%H:%M:%S')}.{at.microsecond:06d}123Z {text}"


LOG = "\n".join(
    [
        stamped(2.5, "2026-11-26 08:00:02,500 spyre-runtime INFO cache ... is READY"),
        stamped(2.6, "2026-11-26 08:00:02,600 spyre-runtime INFO exec vllm serve /models/g"),
        stamped(20.0, "(APIServer pid=1) INFO non-default args: {'model': '/models/g'}"),
        stamped(24.0, "(EngineCore pid=9) INFO [core.py:122] Initializing a V1 LLM engine"),
        stamped(30.0, "(EngineCore pid=9) INFO [spyre_worker.py:395] load model..."),
        stamped(31.5, "(EngineCore pid=9) INFO [spyre_worker.py:405] load model took 1.5s"),
        stamped(33.0, "(EngineCore pid=9) INFO [WARMUP] Prefill [1/2]..."),
        stamped(50.0, "(EngineCore pid=9) INFO [WARMUP] Finished in 17.0s (compilation ...)"),
        stamped(55.25, "(APIServer pid=1) INFO:     Application startup complete."),
    ]
)


def test_each_phase_runs_from_the_milestone_before() -> None:
    found = cache_effect.phases(cache_effect.stamped(LOG), created=T0, ready=T0 + 58.0)
    assert list(found) == [name for name, _ in cache_effect.PHASES]
    expected = [2.5, 17.5, 4.0, 6.0, 1.5, 1.5, 17.0, 5.25, 2.75]
    assert list(found.values()) == pytest.approx(expected)


def test_a_missing_milestone_folds_its_phase_into_the_next() -> None:
    log = "\n".join(line for line in LOG.splitlines() if "load model took" not in line)
    found = cache_effect.phases(cache_effect.stamped(log), created=T0, ready=T0 + 58.0)
    assert found["weights load"] is None
    assert found["engine setup"] == pytest.approx(3.0)
    assert cache_effect.phases(cache_effect.stamped("no timestamps\n"), T0, T0 + 1.0) == {
        name: None for name, _ in cache_effect.PHASES[:-1]
    } | {"readiness": 1.0}


def test_the_bare_process_sees_the_pods_paths_in_its_volumes_host_folders(
    tmp_path: Path,
) -> None:
    """The pod's mount paths in its env and args become the host folders of its volumes
    (hostPath, a fresh folder per emptyDir); the longest mount wins, other text stays."""
    spec = {
        "containers": [{"volumeMounts": [
            {"name": "models", "mountPath": "/models", "readOnly": True},
            {"name": "cache", "mountPath": "/var/cache/spyre"},
            {"name": "sub", "mountPath": "/var/cache/spyre/weights", "subPath": "w"},
            {"name": "home", "mountPath": "/home/spyre"},
        ]}],
        "volumes": [
            {"name": "models", "hostPath": {"path": "/srv/models"}},
            {"name": "cache", "hostPath": {"path": "/srv/cache"}},
            {"name": "sub", "hostPath": {"path": "/srv/cache"}},
            {"name": "home", "emptyDir": {}},
        ],
    }  # fmt: skip
    host = cache_effect.HostPaths(None, spec, tmp_path)  # no claims
    assert host("/models/granite") == "/srv/models/granite"
    assert host("/var/cache/spyre/abc/inductor") == "/srv/cache/abc/inductor"
    assert host("/var/cache/spyre/weights/x") == "/srv/cache/w/x"
    assert host("/models") == "/srv/models" and host("/modelsx") == "/modelsx"
    assert Path(host("/home/spyre")).parent == tmp_path
    assert host("--max-model-len") == "--max-model-len"
