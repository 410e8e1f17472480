"""spec.routing (pure parts): its schema's refusals, the InferencePool, the endpoint picker
and the HTTPRoute, the NetworkPolicy that admits the picker, and the route step's actions,
status and Routing condition."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from apilib import example, merge
from test_reconcile_decide import applied, body, cond, ready_state, step

from spyre_operator.api.validation import parse, validate
from spyre_operator.cli import main
from spyre_operator.reconcile.routes import Router
from spyre_operator.render.cachekey import cache_key
from spyre_operator.render.router import http_route, inference_pool, picker_objects
from spyre_operator.render.serving import build_network_policy
from spyre_operator.settings import Settings

pytestmark = pytest.mark.unit

GATEWAY = {"routing": {"gateway": {"name": "inference", "namespace": "gw"}}}
POOL_ONLY: dict[str, Any] = {"routing": {}}
SETTINGS = Settings(picker_image="epp:test", picker_cluster_role="picker-role")
SERVER = {"serving.spyre.dev/model": "micro-granite-cpu", "app.kubernetes.io/component": "server"}


def problems(patch: dict[str, Any]) -> list[str]:
    return [str(p) for p in validate(merge(example("micro-granite-cpu"), {"spec": patch}))]


def model(patch: dict[str, Any]) -> Any:
    doc = merge(example("micro-granite-cpu"), {"spec": patch})
    doc["metadata"] |= {"namespace": "ai", "uid": "u1"}
    return parse(doc)


def test_bad_routing_is_refused_with_the_field() -> None:
    (nameless,) = problems({"routing": {"gateway": {"namespace": "gw"}}})
    assert nameless.startswith("spec.routing.gateway.name:")
    (mode,) = problems({"routing": {"failureMode": "Sometimes"}})
    assert mode.startswith("spec.routing.failureMode:") and "FailOpen" in mode
    (host,) = problems({"routing": {"gateway": {"name": "g", "hostnames": ["Bad_Host"]}}})
    assert host.startswith("spec.routing.gateway.hostnames[0]:")
    assert problems(GATEWAY) == [] and problems(POOL_ONLY) == []


def test_routing_is_not_part_of_the_cache_key() -> None:
    assert cache_key(model({}).spec) == cache_key(model(GATEWAY).spec)


def test_the_pool_selects_the_serving_pods_on_vllms_port_through_the_picker() -> None:
    pool = inference_pool(model(GATEWAY), "u1")
    assert (pool["apiVersion"], pool["kind"]) == ("inference.networking.k8s.io/v1", "InferencePool")
    assert pool["metadata"]["ownerReferences"][0]["uid"] == "u1"
    assert pool["spec"] == {
        "selector": {"matchLabels": SERVER},
        "targetPorts": [{"number": 8000}],
        "endpointPickerRef": {
            "name": "micro-granite-cpu-epp",
            "port": {"number": 9002},
            "failureMode": "FailOpen",
        },
    }


def test_the_picker_scores_prefixes_in_spyres_64_token_blocks_and_is_owned_by_the_pool() -> None:
    objs = picker_objects(model(GATEWAY), "pool-uid", "epp:test", "picker-role")
    kinds = [o["kind"] for o in objs]
    assert kinds == ["ServiceAccount", "RoleBinding", "Service", "Deployment"]
    assert {o["metadata"]["name"] for o in objs} == {"micro-granite-cpu-epp"}
    for obj in objs:
        (owner,) = obj["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["uid"], owner["blockOwnerDeletion"]) == (
            "InferencePool",
            "pool-uid",
            False,
        )
    hashes = {o["metadata"]["annotations"]["serving.spyre.dev/applied"] for o in objs}
    assert len(hashes) == 1  # one hash: applied together
    binding = objs[1]
    assert binding["roleRef"]["name"] == "picker-role"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "micro-granite-cpu-epp", "namespace": "ai"}
    ]
    deploy = objs[3]
    pod = deploy["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert pod["serviceAccountName"] == "micro-granite-cpu-epp"
    assert container["image"] == "epp:test"
    args = container["args"]
    assert args[args.index("--pool-name") + 1] == "micro-granite-cpu"
    assert args[args.index("--pool-namespace") + 1] == "ai"
    config = yaml.safe_load(args[args.index("--config-text") + 1])
    (prefix,) = (p for p in config["plugins"] if p["type"] == "prefix-cache-scorer")
    assert prefix["parameters"] == {"autoTune": False, "blockSizeTokens": 64}
    labels = deploy["spec"]["template"]["metadata"]["labels"]
    assert deploy["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert objs[2]["spec"]["selector"] == deploy["spec"]["selector"]["matchLabels"]
    assert "serving.spyre.dev/model" not in labels  # never a serving pod of the pool


def test_a_long_model_name_gives_a_picker_name_that_is_a_dns_label() -> None:
    doc = merge(example("micro-granite-cpu"), {"spec": GATEWAY})
    doc["metadata"] |= {"namespace": "ai", "name": "m" * 63}
    (account, *_) = picker_objects(parse(doc), None, "epp:test", "r")
    name = account["metadata"]["name"]
    assert len(name) == 63 and name != "m" * 63


def test_the_route_sends_the_gateways_requests_to_the_pool() -> None:
    routing = {"gateway": {"name": "inference", "sectionName": "http", "hostnames": ["a.b"]}}
    route = http_route(model({"routing": routing}), "u1")
    assert route is not None
    assert route["spec"]["parentRefs"] == [
        {
            "group": "gateway.networking.k8s.io",
            "kind": "Gateway",
            "name": "inference",
            "sectionName": "http",
        }
    ]
    assert route["spec"]["hostnames"] == ["a.b"]
    (rule,) = route["spec"]["rules"]
    assert rule["backendRefs"] == [
        {
            "group": "inference.networking.k8s.io",
            "kind": "InferencePool",
            "name": "micro-granite-cpu",
        }
    ]
    assert http_route(model(POOL_ONLY), "u1") is None


def test_the_network_policy_admits_the_picker_besides_allow_from() -> None:
    peers = [{"ipBlock": {"cidr": "10.0.0.0/8"}}]
    spec = {"service": {"allowFrom": peers}}
    (rule,) = build_network_policy(model(spec))["spec"]["ingress"]
    assert rule["from"] == peers
    (rule,) = build_network_policy(model(spec | POOL_ONLY))["spec"]["ingress"]
    picker = {
        "app.kubernetes.io/instance": "micro-granite-cpu",
        "app.kubernetes.io/component": "endpoint-picker",
    }
    assert rule["from"] == [*peers, {"podSelector": {"matchLabels": picker}}]


def live(manifest: dict[str, Any], uid: str, **status: Any) -> dict[str, Any]:
    obj = copy.deepcopy(manifest)
    obj["metadata"] |= {"uid": uid, "resourceVersion": "5"}
    obj["status"] = status
    return obj


def routed(spec: dict[str, Any], router: Router, **status: Any) -> Any:
    kwargs, stored = ready_state(spec)
    return step(body(spec, **(stored | status)), SETTINGS, router=router, **kwargs)


def test_the_step_makes_the_pool_then_its_picker_then_reports_the_gateway() -> None:
    first = routed(GATEWAY, Router(True, None, None, True, None, True))
    pool = applied(first, "InferencePool")
    route = applied(first, "HTTPRoute")
    assert not [a for a in first.actions if a.obj["kind"] == "ServiceAccount"]  # no pool uid yet
    assert cond(first, "Routing") == ("False", "PickerNotReady")
    status = first.status.to_k8s()["routing"]
    assert status == {"inferencePool": "micro-granite-cpu", "httpRoute": "micro-granite-cpu"}
    made = live(pool, "pool-uid")
    second = routed(GATEWAY, Router(True, made, None, True, live(route, "r"), True))
    picker = [a.obj for a in second.actions if a.obj["kind"] in ("ServiceAccount", "RoleBinding")]
    assert len(picker) == 2
    deploy = next(
        a.obj
        for a in second.actions
        if a.obj["metadata"]["name"].endswith("-epp") and a.obj["kind"] == "Deployment"
    )
    running = live(deploy, "d", availableReplicas=1)
    accepted = {
        "parents": [
            {
                "parentRef": {"name": "inference"},
                "conditions": [{"type": "Accepted", "status": "True"}],
            }
        ]
    }
    waiting = routed(GATEWAY, Router(True, made, running, True, live(route, "r"), True))
    assert waiting.actions == []  # nothing changed: nothing written
    assert cond(waiting, "Routing") == ("False", "WaitingForGateway")
    done = routed(GATEWAY, Router(True, made, running, True, live(route, "r", **accepted), True))
    assert cond(done, "Routing") == ("True", "Routed")
    missing = routed(GATEWAY, Router(True, made, running, True, live(route, "r"), False))
    (message,) = (
        c["message"] for c in missing.status.to_k8s()["conditions"] if c["type"] == "Routing"
    )
    assert cond(missing, "Routing") == ("False", "GatewayNotFound")
    assert "Gateway gw/inference does not exist" in message
    refused = {
        "parents": [
            {
                "parentRef": {"name": "inference"},
                "conditions": [{"type": "ResolvedRefs", "status": "False", "message": "no picker"}],
            }
        ]
    }
    bad = routed(
        GATEWAY, Router(True, live(pool, "p", **refused), running, True, live(route, "r"), True)
    )
    assert cond(bad, "Routing") == ("False", "NotAccepted")
    pool_only = routed(POOL_ONLY, Router(True, made, running))
    assert cond(pool_only, "Routing") == ("True", "PoolReady")


def test_without_the_crds_the_condition_says_what_to_install() -> None:
    plan = routed(GATEWAY, Router(False, None, None))
    assert cond(plan, "Routing") == ("False", "InferencePoolNotInstalled")
    assert not [a for a in plan.actions if a.obj["kind"] in ("InferencePool", "HTTPRoute")]
    plan = routed(GATEWAY, Router(True, None, None, False, None, None))
    assert cond(plan, "Routing") == ("False", "GatewayAPINotInstalled")
    assert [a.obj["kind"] for a in plan.actions if a.obj["kind"] == "InferencePool"]
    assert plan.status.phase == "Ready"  # served through its Service meanwhile


def test_routing_removed_deletes_the_pool_and_the_route_until_they_are_gone() -> None:
    first = routed(GATEWAY, Router(True, None, None, True, None, True))
    pool = live(applied(first, "InferencePool"), "p")
    route = live(applied(first, "HTTPRoute"), "r")
    was = {"routing": {"inferencePool": "micro-granite-cpu", "httpRoute": "micro-granite-cpu"}}
    plan = routed({}, Router(True, pool, None, True, route, None), **was)
    assert sorted((a.verb, a.obj["kind"]) for a in plan.actions) == [
        ("delete", "HTTPRoute"),
        ("delete", "InferencePool"),
    ]
    assert plan.status.to_k8s()["routing"] == was["routing"]
    assert "Routing" not in {c["type"] for c in plan.status.to_k8s()["conditions"]}
    gone = routed({}, Router(True, None, None, True, None, None), **was)
    assert gone.actions == [] and "routing" not in gone.status.to_k8s()
    # a gateway removed: the route goes, the pool stays
    plan = routed(POOL_ONLY, Router(True, pool, None, True, route, None))
    assert [(a.verb, a.obj["kind"]) for a in plan.actions if a.verb == "delete"] == [
        ("delete", "HTTPRoute")
    ]


def test_render_prints_the_pool_the_picker_and_the_route(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(merge(example("micro-granite-cpu"), {"spec": GATEWAY})))
    assert main(["render", str(path), "--uid", "u1"]) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    kinds = [d["kind"] for d in docs]
    assert kinds[-6:] == [
        "InferencePool",
        "ServiceAccount",
        "RoleBinding",
        "Service",
        "Deployment",
        "HTTPRoute",
    ]
    doc = yaml.safe_load(path.read_text())
    doc["metadata"] |= {"namespace": "default", "uid": "u1"}
    assert docs[-6] == inference_pool(parse(doc), "u1")
    picker = docs[-2]
    assert "ownerReferences" not in picker["metadata"]  # the pool's uid: once it is made
    (container,) = picker["spec"]["template"]["spec"]["containers"]
    assert container["image"] == Settings().picker_image
    assert docs[-4]["roleRef"]["name"] == "spyre-operator-endpoint-picker"  # the chart's
