"""Property (issue 18): what `validate` accepts, Kubernetes accepts. Examples with their
pass-through Kubernetes fields (tolerations, nodeSelector, resources, affinity, spread
constraints, env sources, labels and annotations, names, sizes) set to values near and
past Kubernetes' rules; every document `validate` accepts renders children that the real
API server takes in a dry run, and so does a Pod from each pod template (Kubernetes checks
more on a Pod than on the Job or Deployment that holds its template)."""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any

import pytest
from cluster_sim import ROOT, kube_for
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spyre_operator.api.validation import review
from spyre_operator.kube.client import ApiError, Kube
from spyre_operator.reconcile.dryrun import STAND_IN_COMMIT
from spyre_operator.render.children import desired

sys.path.insert(0, str(ROOT / "tests" / "unit"))
sys.path.insert(0, str(ROOT / "benchmarks"))
import fuzz  # its server dry runs of the children
from apilib import EXAMPLES, load_example

pytestmark = pytest.mark.integration

SETTINGS = settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
DOCS = [load_example(p) for p in EXAMPLES]


def near(
    valid: list[Any], edge: list[Any], *more: st.SearchStrategy[Any]
) -> st.SearchStrategy[Any]:
    """Mostly values Kubernetes takes (so that many documents pass validate and reach the
    server), else values at or past its rules."""
    return st.one_of(st.sampled_from(valid), st.sampled_from(valid), st.sampled_from(edge), *more)


names = st.text(alphabet="abz09-._/AZ", min_size=0, max_size=12)
label_keys = near(
    ["app", "example.com/tier", "kubernetes.io/arch", "a" * 63, "a.b/c-d_e"],
    ["a" * 64, "-a", "Ex.com/x", "a..b/c", "", "a b", "a/b/c", "a/"],
    names,
)
label_values = near(["", "v1", "a" * 63, "x.y_z"], ["a" * 64, "-x", "x-", "a b"], names)
quantities = near(
    ["1", "0", "1.5", "100m", "1Gi", "1e3", "1Ki", "2Gi"],
    ["-1", "0.5m", "1E3", "1e-9", "9" * 20, "1.2.3", "1 Gi", "0x10", "+1", ".5", "5."],
    st.text(alphabet="0123456789.eEmKkiG+-", min_size=1, max_size=8),
)

resource_names = near(
    ["cpu", "memory", "ibm.com/spyre_pf", "example.com/x", "ephemeral-storage"],
    ["x", "hugepages-2Mi", "requests.cpu", "a/b/c", "kubernetes.io/x", "example.com/X_"],
)
resources = st.fixed_dictionaries(
    {},
    optional={
        "requests": st.dictionaries(resource_names, quantities, max_size=3),
        "limits": st.dictionaries(resource_names, quantities, max_size=3),
    },
)
tolerations = st.lists(
    st.fixed_dictionaries(
        {"key": label_keys},
        optional={
            "operator": st.sampled_from(["Exists", "Equal"]),
            "value": label_values,
            "effect": st.sampled_from(["NoSchedule", "PreferNoSchedule", "NoExecute"]),
            "tolerationSeconds": near([0, 30], [-5, 2**40]),
        },
    ),
    max_size=3,
)
expression_values = st.lists(st.one_of(label_values, st.integers(-9, 99).map(str)), max_size=3)
node_requirements = st.lists(
    st.fixed_dictionaries(
        {"key": label_keys, "operator": st.sampled_from(["In", "NotIn", "Exists",
                                                         "DoesNotExist", "Gt", "Lt"])},
        optional={"values": expression_values},
    ),
    min_size=1,
    max_size=2,
)  # fmt: skip
field_requirements = st.lists(
    st.fixed_dictionaries(
        {"key": st.sampled_from(["metadata.name", "metadata.namespace", "spec.nodeName"]),
         "operator": st.sampled_from(["In", "NotIn", "Exists"])},
        optional={"values": expression_values},
    ),
    min_size=1,
    max_size=1,
)  # fmt: skip
label_selectors = st.fixed_dictionaries(
    {},
    optional={
        "matchLabels": st.dictionaries(label_keys, label_values, max_size=2),
        "matchExpressions": st.lists(
            st.fixed_dictionaries(
                {"key": label_keys,
                 "operator": st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist"])},
                optional={"values": st.lists(label_values, max_size=2)},
            ),
            max_size=2,
        ),
    },
)  # fmt: skip
term = st.fixed_dictionaries(
    {}, optional={"matchExpressions": node_requirements, "matchFields": field_requirements}
)
# Fields newer than the 1.20 test server (which drops them): checked by a current one
# (KUBEBUILDER_ASSETS, docs/api.md)
match_label_keys = st.lists(near(["pod-template-hash", "tier"], ["app", "a b"], label_keys),
                            max_size=2)  # fmt: skip
pod_term = st.fixed_dictionaries(
    {"topologyKey": label_keys},
    optional={
        "labelSelector": label_selectors,
        "namespaces": st.lists(names, max_size=2),
        "namespaceSelector": label_selectors,
        "matchLabelKeys": match_label_keys,
        "mismatchLabelKeys": match_label_keys,
    },
)
affinity = st.fixed_dictionaries(
    {},
    optional={
        "nodeAffinity": st.fixed_dictionaries(
            {},
            optional={
                "requiredDuringSchedulingIgnoredDuringExecution": st.fixed_dictionaries(
                    {"nodeSelectorTerms": st.lists(term, min_size=1, max_size=2)}
                ),
                "preferredDuringSchedulingIgnoredDuringExecution": st.lists(
                    st.fixed_dictionaries({"weight": st.integers(-1, 101), "preference": term}),
                    max_size=2,
                ),
            },
        ),
        "podAntiAffinity": st.fixed_dictionaries(
            {},
            optional={
                "requiredDuringSchedulingIgnoredDuringExecution": st.lists(pod_term, max_size=2),
                "preferredDuringSchedulingIgnoredDuringExecution": st.lists(
                    st.fixed_dictionaries(
                        {"weight": st.integers(-1, 101), "podAffinityTerm": pod_term}
                    ),
                    max_size=1,
                ),
            },
        ),
    },
)
spread = st.lists(
    st.fixed_dictionaries(
        {"maxSkew": st.integers(-1, 3), "topologyKey": label_keys,
         "whenUnsatisfiable": st.sampled_from(["DoNotSchedule", "ScheduleAnyway"])},
        optional={"labelSelector": label_selectors, "minDomains": st.integers(-1, 3),
                  "matchLabelKeys": match_label_keys,
                  "nodeAffinityPolicy": st.sampled_from(["Honor", "Ignore", "Always"]),
                  "nodeTaintsPolicy": st.sampled_from(["Honor", "Ignore"])},
    ),
    max_size=2,
)  # fmt: skip
env = st.lists(
    st.fixed_dictionaries(
        {"name": st.sampled_from(["A", "A_B", "a.b", "1A", "A-B", "A=B", "VLLM_X"])},
        optional={
            "value": st.text(max_size=8),
            "valueFrom": st.one_of(
                st.fixed_dictionaries(
                    {"fieldRef": st.fixed_dictionaries(
                        {"fieldPath": st.sampled_from(
                            ["metadata.name", "status.podIP", "spec.nodeName", "metadata.uid",
                             "metadata.labels['app']", "metadata.labels", "spec.x",
                              "status.hostIPs"]
                        )},
                        optional={"apiVersion": st.sampled_from(["v1", "v2", "apps/v1"])},
                    )}
                ),
                st.fixed_dictionaries(
                    {"secretKeyRef": st.fixed_dictionaries({"name": names, "key": names})}
                ),
            ),
        },
    ),
    max_size=2,
)  # fmt: skip
object_names = near(["a", "a-b.c", "a" * 253], ["a" * 254, "A", "a_b", "-a", ""], names)
FIELDS: dict[tuple[str, ...], st.SearchStrategy[Any]] = {
    ("resources",): resources,
    ("cache", "compile", "resources"): resources,
    ("tolerations",): tolerations,
    ("cache", "compile", "tolerations"): tolerations,
    ("nodeSelector",): st.dictionaries(label_keys, label_values, max_size=3),
    ("podLabels",): st.dictionaries(label_keys, label_values, max_size=3),
    ("podAnnotations",): st.dictionaries(label_keys, st.text(max_size=20), max_size=3),
    ("affinity",): affinity,
    ("topologySpreadConstraints",): spread,
    ("env",): env,
    ("schedulerName",): object_names,
    ("priorityClassName",): object_names,
    ("serviceAccountName",): object_names,
    ("imagePullSecrets",): st.lists(st.fixed_dictionaries({"name": object_names}), max_size=2),
    ("image",): st.sampled_from(["quay.io/x:1", "x", "X", "quay.io/x@sha256:" + "a" * 64,
                                 "localhost:5000/a/b:c", "a:b:c", "quay.io/x:" + "t" * 129]),
    ("cache", "volume", "size"): quantities,
    ("cache", "volume", "claimName"): object_names,
    ("cache", "volume", "storageClassName"): object_names,
}  # fmt: skip


@st.composite
def mutated(draw: st.DrawFn, field: tuple[str, ...]) -> dict[str, Any]:
    """An example with `field` set, and sometimes one more pass-through field."""
    doc = copy.deepcopy(draw(st.sampled_from(DOCS)))
    for where in [field, *draw(st.lists(st.sampled_from(sorted(FIELDS)), max_size=1))]:
        parent = doc["spec"]
        for part in where[:-1]:
            parent = parent.setdefault(part, {})
        parent[where[-1]] = draw(FIELDS[where])
    return doc


@pytest.fixture(scope="module")
def server(kubeconfig: Path) -> Kube:
    return kube_for(kubeconfig)


@pytest.mark.parametrize("field", sorted(FIELDS), ids=".".join)
def test_what_validate_accepts_the_api_server_accepts(
    server: Kube, namespace: str, field: tuple[str, ...]
) -> None:
    account = {"metadata": {"name": "default"}}  # as the controller manager would make it
    try:
        server.request("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts", account)
    except ApiError as err:
        if not err.conflict:
            raise
    checked: list[int] = []

    @SETTINGS
    @given(mutated(field))
    def check(doc: dict[str, Any]) -> None:
        doc["metadata"] = {"name": "fuzz", "namespace": namespace}
        verdict = review(doc)
        if verdict.model is None:
            return
        objects = desired(verdict.model, "0a0a0a0a", commit=STAND_IN_COMMIT).objects()
        why = fuzz.refusals(server, objects)  # the children, and a Pod from each template
        assert why == "", why  # Hypothesis shrinks it to the smallest document
        checked.append(len(objects))

    check()
    assert len(checked) >= 5  # documents validate accepted, each checked on the server
