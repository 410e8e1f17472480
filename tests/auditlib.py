"""The operator's API calls as the API server saw them.

The test control plane (tests/conftest.py) keeps an audit log of every ServiceAccount's
requests. The integration tier runs the operator as the chart's ServiceAccount under the
chart's roles (tests/integration/chart_identity.py), fails a test on any request the API
server refused it, and checks what it called against RECORD, which the chart tier then
checks the rendered roles against: the grants follow the calls the code really makes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

TESTS = Path(__file__).parent
RECORD = TESTS / "operator-calls.yaml"
RECORD_ENV = "SPYRE_RECORD_CALLS"  # set to 1: the integration tier rewrites RECORD
RECORD_HEADER = f"""\
# The operator's API calls, as the API server's audit log saw them while the integration
# tier ran the operator as the chart's ServiceAccount (tests/auditlib.py). Generated: the
# tier fails when the code's calls and this list differ; rewrite it with
#   {RECORD_ENV}=1 scripts/test tests/integration
# namespaced: in a watched namespace; cluster: not in a namespace.
"""

# Metadata (who, what, the answer) of ServiceAccounts' requests; nothing of anyone else's.
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [
        {"level": "Metadata", "userGroups": ["system:serviceaccounts"]},
        {"level": "None"},
    ],
}


def audit_log_path(directory: Path) -> Path:
    return directory / "audit.log"


def audit_args(directory: Path) -> list[str]:
    """The kube-apiserver flags that write the audit log under `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    policy = directory / "audit-policy.yaml"
    policy.write_text(yaml.safe_dump(AUDIT_POLICY))
    return [f"--audit-policy-file={policy}", f"--audit-log-path={audit_log_path(directory)}"]


@dataclass(frozen=True, order=True)
class Call:
    verb: str
    resource: str
    group: str = ""
    subresource: str = ""

    def __str__(self) -> str:
        sub = f"/{self.subresource}" if self.subresource else ""
        return f"{self.verb} {self.resource}{sub}" + (f".{self.group}" if self.group else "")

    @classmethod
    def parse(cls, text: str) -> Call:
        verb, _, rest = text.partition(" ")
        resource, _, group = rest.partition(".")
        resource, _, sub = resource.partition("/")
        return cls(verb, resource, group, sub)


@dataclass(frozen=True)
class Calls:
    namespaced: frozenset[Call]
    cluster: frozenset[Call]

    def __or__(self, other: Calls) -> Calls:
        return Calls(self.namespaced | other.namespaced, self.cluster | other.cluster)

    def as_text(self) -> str:
        lists = {"namespaced": self.namespaced, "cluster": self.cluster}
        return RECORD_HEADER + yaml.safe_dump({k: sorted(map(str, v)) for k, v in lists.items()})


NO_CALLS = Calls(frozenset(), frozenset())


def load_record() -> Calls:
    doc = yaml.safe_load(RECORD.read_text())
    return Calls(*(frozenset(map(Call.parse, doc[part])) for part in ("namespaced", "cluster")))


def calls_of(event: dict[str, Any]) -> list[Call]:
    """What the authorizer asked for one request: a server-side apply that created its
    object (201) needed `create` as well as `patch`."""
    ref = event["objectRef"]
    call = Call(event["verb"], ref["resource"], ref.get("apiGroup", ""), ref.get("subresource", ""))
    if event["verb"] == "patch" and event.get("responseStatus", {}).get("code") == 201:
        return [call, replace(call, verb="create")]
    return [call]


class AuditLog:
    """The events of one user in the log, read on from where the last read stopped."""

    def __init__(self, path: Path, user: str) -> None:
        self.path, self.user = path, user
        self.offset = path.stat().st_size if path.exists() else 0

    def read(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        with self.path.open("rb") as log:
            log.seek(self.offset)
            data = log.read()
        end = data.rfind(b"\n") + 1  # a line still being written is read next time
        self.offset += end
        events = (json.loads(line) for line in data[:end].splitlines() if line.strip())
        return [e for e in events if e["user"]["username"] == self.user and "objectRef" in e]


def summarize(events: list[dict[str, Any]]) -> tuple[Calls, list[str]]:
    """(the calls made, a line for each the authorizer refused)"""
    namespaced: set[Call] = set()
    cluster: set[Call] = set()
    refused: dict[str, int] = {}
    for event in events:
        scope = event["objectRef"].get("namespace")
        for call in calls_of(event):
            (namespaced if scope else cluster).add(call)
        # the authorizer's answer (a quota's refusal is a 403 too, of an allowed call)
        if event.get("annotations", {}).get("authorization.k8s.io/decision") == "forbid":
            line = f"{event['verb']} {event['requestURI']}: forbidden"
            refused[line] = refused.get(line, 0) + 1
    lines = [f"{line} ({n} times)" if n > 1 else line for line, n in refused.items()]
    return Calls(frozenset(namespaced), frozenset(cluster)), lines
