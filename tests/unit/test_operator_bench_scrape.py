"""benchmarks/operator_bench.py under load (its harness, operator_harness.py): a /metrics
scrape that times out is tried again, waiting longer, instead of ending the phase it
measures; an operator that is not listening is said at once (the start-up waits on that)."""

from __future__ import annotations

import http.server
import sys
import threading
import urllib.error
from collections.abc import Iterator

import pytest
from apilib import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
import operator_harness

from spyre_devcluster.controlplane import free_port

pytestmark = pytest.mark.unit


class Slow(http.server.BaseHTTPRequestHandler):
    """Its first scrape answers only after the scraper gave up; the others at once."""

    answered = threading.Event()
    requests = 0

    def do_GET(self) -> None:
        type(self).requests += 1
        if type(self).requests == 1:
            Slow.answered.wait(timeout=10)  # until the next scrape is answered
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"spyre_operator_reconciles_total 7\n")
        Slow.answered.set()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def slow_operator() -> Iterator[int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Slow)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    Slow.answered.set()
    server.shutdown()
    server.server_close()


def test_a_scrape_that_times_out_is_tried_again(
    slow_operator: int, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(operator_harness, "SCRAPE_TIMEOUT", 0.5)
    assert operator_harness.read_metrics(slow_operator) == {"spyre_operator_reconciles_total": 7.0}
    assert Slow.requests == 2
    assert "a /metrics scrape timed out after 0.5 s" in capsys.readouterr().out


def test_an_operator_not_listening_is_said_at_once() -> None:
    with pytest.raises(urllib.error.URLError) as refused:
        operator_harness.read_metrics(free_port())
    assert isinstance(refused.value.reason, ConnectionRefusedError)
