"""spec.autoscaling (pure parts): its rules, the ScaledObject and its query (the one the
docs' hand-written ScaledObject uses), the cards the nodes hold, and the autoscale step."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from apilib import example, merge
from test_reconcile_decide import applied, body, cond, ready_state, step

from spyre_operator.api.validation import parse, validate
from spyre_operator.cli import main
from spyre_operator.kube.client import ApiError, Kube
from spyre_operator.kube.entries import index_entry
from spyre_operator.reconcile.capacity import capacity, eligible
from spyre_operator.reconcile.observe import Autoscaler, read_autoscaler
from spyre_operator.render.autoscaler import query, scaled_object
from spyre_operator.render.cachekey import cache_key
from spyre_operator.settings import Settings

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
PROM = Settings(prometheus_address="http://prometheus-operated.monitoring:9090")
SCALING = {"autoscaling": {"minReplicas": 1, "maxReplicas": 4}}
CARDS = {"accelerator": {"count": 2}}  # CPU pods holding 2 cards each (a card stand-in)
RESOURCE = "ibm.com/spyre_pf"


def problems(patch: dict[str, Any], stem: str = "micro-granite-cpu") -> list[str]:
    return [str(p) for p in validate(merge(example(stem), {"spec": patch}))]


def test_bad_autoscaling_is_refused_with_the_field_and_the_fix() -> None:
    assert problems({"autoscaling": {"minReplicas": 3, "maxReplicas": 2}}) == [
        "spec.autoscaling.minReplicas: 3 is above maxReplicas 2: lower minReplicas or raise "
        "maxReplicas"
    ]
    both = {"maxReplicas": 2, "target": {"waitingRequests": 2, "kvCacheUsagePercent": 80}}
    assert problems({"autoscaling": both}) == [
        "spec.autoscaling.target: set exactly one of waitingRequests or kvCacheUsagePercent"
    ]
    kv = {"autoscaling": {"maxReplicas": 2, "target": {"kvCacheUsagePercent": 80}}}
    unchunked = {"batching": {"continuous": {"chunkedPrefill": False, "maxNumBatchedTokens": 2048}}}
    (said,) = problems(unchunked | kv)
    assert said == (
        "spec.autoscaling.target.kvCacheUsagePercent: vLLM-Spyre does not measure KV-cache "
        "use with chunkedPrefill false (only with continuous batching and chunked prefill): "
        "use target.waitingRequests"
    )
    (static,) = problems(kv, "granite-embedding-125m-english")
    assert "with static batching" in static
    assert problems(kv) == []
    assert problems({"autoscaling": {"maxReplicas": 0}}) == [
        "spec.autoscaling.maxReplicas: must be at least 1, got 0"
    ]
    assert problems({"autoscaling": {"minReplicas": 0, "maxReplicas": 1}}) == []


def test_autoscaling_is_not_part_of_the_cache_key() -> None:
    plain = parse(example("micro-granite-cpu")).spec
    scaled = parse(merge(example("micro-granite-cpu"), {"spec": SCALING})).spec
    assert cache_key(plain) == cache_key(scaled)


def test_the_scaled_object_scales_the_model_on_its_own_pods() -> None:
    doc = merge(example("micro-granite-cpu"), {"spec": SCALING})
    doc["metadata"] |= {"namespace": "ai", "uid": "u1"}
    target = {"waitingRequests": 2}
    doc["spec"]["autoscaling"] |= {"scaleDownDelaySeconds": 120, "target": target}
    obj = scaled_object(parse(doc), "u1", PROM.prometheus_address, 3)
    spec = obj["spec"]
    assert (obj["apiVersion"], obj["kind"]) == ("keda.sh/v1alpha1", "ScaledObject")
    assert obj["metadata"]["name"] == "micro-granite-cpu"
    assert obj["metadata"]["ownerReferences"][0]["uid"] == "u1"
    assert spec["scaleTargetRef"] == {
        "apiVersion": "serving.spyre.dev/v1alpha1",
        "kind": "SpyreModel",
        "name": "micro-granite-cpu",
    }
    assert (spec["minReplicaCount"], spec["maxReplicaCount"], spec["cooldownPeriod"]) == (1, 3, 120)
    (trigger,) = spec["triggers"]
    assert trigger["type"] == "prometheus" and trigger["metricType"] == "AverageValue"
    assert trigger["metadata"] == {
        "serverAddress": "http://prometheus-operated.monitoring:9090",
        "query": 'sum(vllm:num_requests_waiting{namespace="ai",'
        'pod=~"micro-granite-cpu-[a-z0-9]+-[a-z0-9]+"})',
        "threshold": "2",
    }
    # deterministic
    assert obj == scaled_object(parse(doc), "u1", PROM.prometheus_address, 3)


def test_a_model_query_never_counts_the_pods_of_a_model_named_after_it() -> None:
    pods = re.search(r'pod=~"([^"]+)"', query("waitingRequests", "ns", "a"))
    assert pods is not None
    assert re.fullmatch(pods.group(1), "a-7d9f8c6b5-x2x9z")
    assert not re.fullmatch(pods.group(1), "a-b-7d9f8c6b5-x2x9z")


def test_the_docs_hand_written_scaled_object_uses_the_operators_query() -> None:
    text = (ROOT / "docs" / "install.md").read_text()
    blocks = re.findall(r"```yaml\n(.*?)```", text, re.S)
    (doc,) = [d for b in blocks if (d := yaml.safe_load(b)) and d.get("kind") == "ScaledObject"]
    meta, (trigger,) = doc["metadata"], doc["spec"]["triggers"]
    wanted = query("waitingRequests", meta["namespace"], doc["spec"]["scaleTargetRef"]["name"])
    assert trigger["metadata"]["query"] == wanted


def node(name: str, cards: int, **spec: Any) -> dict[str, Any]:
    raw = {
        "metadata": {"name": name, "labels": {"kubernetes.io/arch": "amd64"}},
        "spec": spec,
        "status": {
            "allocatable": {RESOURCE: str(cards), "cpu": "16"},
            "conditions": [{"type": "Ready", "status": "True"}],
            "images": [{"names": ["big"]}],
        },
    }
    ((_, entry),) = index_entry("nodes", raw).items()
    return entry


def card_pod(node_name: str, cards: int, phase: str = "Running") -> dict[str, Any]:
    raw = {
        "metadata": {"name": f"p-{node_name}-{cards}", "namespace": "ns"},
        "spec": {
            "nodeName": node_name,
            "containers": [{"name": "c", "resources": {"limits": {RESOURCE: str(cards)}}}],
        },
        "status": {"phase": phase},
    }
    ((_, entry),) = index_entry("pods", raw).items()
    return entry


def test_nodes_and_pods_are_kept_with_only_the_cards_and_placement() -> None:
    kept = node("n1", 8, taints=[{"key": "k", "effect": "NoSchedule"}], podCIDR="10.0.0.0/24")
    assert kept == {
        "metadata": {"name": "n1", "labels": {"kubernetes.io/arch": "amd64"}},
        "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]},
        "status": {"ready": True, "cards": {RESOURCE: "8"}},
    }
    assert card_pod("n1", 4)["spec"] == {"nodeName": "n1", "cards": {RESOURCE: 4}}


def test_the_cards_count_where_a_serving_pod_may_go_minus_what_pods_hold() -> None:
    pod = {"nodeSelector": {"kubernetes.io/arch": "amd64"}, "tolerations": []}
    tainted = node("t", 8, taints=[{"key": "gpu", "effect": "NoSchedule"}])
    assert eligible(tainted, pod, RESOURCE) is None
    tolerating = pod | {"tolerations": [{"key": "gpu", "operator": "Exists"}]}
    assert eligible(tainted, tolerating, RESOURCE) == 8
    assert eligible(node("c", 8, unschedulable=True), pod, RESOURCE) is None
    assert eligible(node("n", 8), pod | {"nodeSelector": {"zone": "a"}}, RESOURCE) is None
    nodes = [node("a", 8), node("b", 4), node("small", 1), tainted]
    # two replicas of 4 on a and one on b in all; the model has one placed on a, another
    # pod holds 2 more there: a has 2 free (no replica of 4), b has 4 (one more)
    pods = [card_pod("a", 4), card_pod("a", 2), card_pod("b", 4, phase="Succeeded")]
    room = capacity(nodes, pods, pod, RESOURCE, 4, placed=1, refused=0)
    assert (room.on_nodes, room.now) == (3, 2)
    assert room.why == (
        f"2 node(s) the serving pods may use hold 3 replica(s) of 4 {RESOURCE} in all; "
        "1 placed, room for 1 more"
    )
    # the scheduler refuses one: its word wins over what the operator sees free
    refused = capacity(nodes, pods, pod, RESOURCE, 4, placed=1, refused=1)
    assert (refused.on_nodes, refused.now) == (3, 1) and "1 refused by the scheduler" in refused.why
    none = capacity([node("small", 1)], [], pod, RESOURCE, 4, placed=0, refused=0)
    assert (none.on_nodes, none.now) == (0, 0) and none.why.startswith("no Ready node")


def scaled(spec: dict[str, Any] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    return ready_state(merge(SCALING, spec or {}))


def test_the_scaled_object_waits_for_the_key_and_is_made_once_it_is_compiled() -> None:
    obj = body(SCALING)
    first = step(obj, PROM, pvc_exists=True, autoscaler=Autoscaler(True, None))
    assert not [a for a in first.actions if a.obj["kind"] == "ScaledObject"]
    assert cond(first, "Autoscaling") == ("False", "WaitingForCache")
    kwargs, status = scaled()
    made = step(body(SCALING, **status), PROM, autoscaler=Autoscaler(True, None), **kwargs)
    manifest = applied(made, "ScaledObject")
    assert manifest["spec"]["maxReplicaCount"] == 4
    assert cond(made, "Autoscaling") == ("True", "Scaling")
    assert made.status.to_k8s()["autoscaling"] == {
        "scaledObject": "micro-granite-cpu",
        "minReplicas": 1,
        "maxReplicas": 4,
        "cardsPerReplica": 0,
    }
    # idempotent: the live one as made, nothing to write
    live = copy.deepcopy(manifest) | {
        "status": {"conditions": [{"type": "Ready", "status": "True"}]}
    }
    stored = body(SCALING, **made.status.to_k8s())
    again = step(stored, PROM, autoscaler=Autoscaler(True, live), **kwargs)
    assert again.actions == [] and again.events == []


def test_without_keda_or_prometheus_the_condition_says_what_to_install() -> None:
    kwargs, status = scaled()
    missing = step(body(SCALING, **status), PROM, autoscaler=Autoscaler(False, None), **kwargs)
    assert cond(missing, "Autoscaling") == ("False", "EngineNotInstalled")
    message = missing.status.condition("Autoscaling").message
    assert "scaledobjects.keda.sh" in message and "install KEDA" in message
    assert not [a for a in missing.actions if a.obj["kind"] == "ScaledObject"]
    unset = step(body(SCALING, **status), autoscaler=Autoscaler(True, None), **kwargs)
    assert cond(unset, "Autoscaling") == ("False", "NoPrometheus")


def test_keda_not_ready_is_carried_into_the_condition() -> None:
    kwargs, status = scaled()
    made = step(body(SCALING, **status), PROM, autoscaler=Autoscaler(True, None), **kwargs)
    live = copy.deepcopy(applied(made, "ScaledObject"))
    said = {
        "type": "Ready",
        "status": "False",
        "reason": "ScaledObjectCheckFailed",
        "message": "error querying prometheus",
    }
    live["status"] = {"conditions": [said]}
    plan = step(body(SCALING, **status), PROM, autoscaler=Autoscaler(True, live), **kwargs)
    assert cond(plan, "Autoscaling") == ("False", "EngineNotReady")


def test_removed_autoscaling_deletes_the_scaled_object() -> None:
    kwargs, status = scaled()
    made = step(body(SCALING, **status), PROM, autoscaler=Autoscaler(True, None), **kwargs)
    live = copy.deepcopy(applied(made, "ScaledObject"))
    live["metadata"]["resourceVersion"] = "7"
    plan = step(
        body(None, **made.status.to_k8s()), PROM, autoscaler=Autoscaler(True, live), **kwargs
    )
    (delete,) = [a for a in plan.actions if a.verb == "delete"]
    assert delete.obj == {
        "kind": "ScaledObject",
        "metadata": {"name": "micro-granite-cpu", "namespace": "default", "resourceVersion": "7"},
    }
    assert plan.status.condition("Autoscaling") is None
    gone = step(
        body(None, **plan.status.to_k8s()), PROM, autoscaler=Autoscaler(True, None), **kwargs
    )
    assert "autoscaling" not in gone.status.to_k8s() and gone.actions == []


def test_a_maximum_above_the_cards_is_lowered_and_said() -> None:
    kwargs, status = scaled(CARDS)
    cards = ([node("a", 4), node("b", 2)], [card_pod("a", 2)])
    plan = step(
        body(merge(SCALING, CARDS), **status),
        PROM,
        autoscaler=Autoscaler(True, None),
        cards=cards,
        **kwargs,
    )
    assert applied(plan, "ScaledObject")["spec"]["maxReplicaCount"] == 3
    assert cond(plan, "Autoscaling") == ("True", "LimitedByCards")
    st = plan.status.to_k8s()["autoscaling"]
    assert (st["cardsPerReplica"], st["replicasOnNodes"], st["replicasNow"]) == (2, 3, 3)
    message = plan.status.condition("Autoscaling").message
    assert "maxReplicas 4 is above the 3 the nodes' cards hold" in message
    none = step(
        body(merge(SCALING, CARDS), **status),
        PROM,
        autoscaler=Autoscaler(True, None),
        cards=([node("a", 1)], []),
        **kwargs,
    )
    assert cond(none, "Autoscaling") == ("False", "NoCards")


def test_render_prints_the_scaled_object_given_the_prometheus_address(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(merge(example("micro-granite-cpu"), {"spec": SCALING})))
    assert main(["render", str(path)]) == 0
    assert "ScaledObject" not in capsys.readouterr().out  # no Prometheus to read from
    assert main(["render", str(path), "--prometheus-address", PROM.prometheus_address]) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    (made,) = [d for d in docs if d["kind"] == "ScaledObject"]
    assert made == scaled_object(parse(path_doc(path)), None, PROM.prometheus_address, 4)
    with pytest.raises(SystemExit):
        main(["render", str(path), "--prometheus-address", "prometheus:9090"])
    assert "use http(s)://HOST[:PORT][/PATH]" in capsys.readouterr().err


def path_doc(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(path.read_text())
    doc["metadata"].setdefault("namespace", "default")
    return doc


class Answers(Kube):
    """Answers every request with `answer` (raised when an ApiError)."""

    def __init__(self, answer: dict[str, Any] | ApiError) -> None:
        super().__init__(None)
        self.answer = answer

    def request(self, method: str, url: str, *args: Any, **kw: Any) -> dict[str, Any]:
        assert url == "/apis/keda.sh/v1alpha1/namespaces/ns/scaledobjects/m"
        if isinstance(self.answer, ApiError):
            raise self.answer
        return self.answer


def test_a_404_without_details_means_keda_is_not_installed() -> None:
    unserved = ApiError(404, "Not Found", {"reason": "NotFound", "details": {}})
    assert read_autoscaler(Answers(unserved), "ns", "m") == Autoscaler(False, None)
    details = {"name": "m", "group": "keda.sh", "kind": "scaledobjects"}
    missing = ApiError(404, "Not Found", {"reason": "NotFound", "details": details})
    assert read_autoscaler(Answers(missing), "ns", "m") == Autoscaler(True, None)
    live = {"metadata": {"name": "m"}}
    assert read_autoscaler(Answers(live), "ns", "m") == Autoscaler(True, live)
    with pytest.raises(ApiError):
        read_autoscaler(Answers(ApiError(403, "Forbidden", {})), "ns", "m")
