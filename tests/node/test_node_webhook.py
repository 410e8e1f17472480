"""The admission webhook on the real node: served by the chart-installed operator pod
through its Service (the API server dials the Service's ClusterIP, kube-proxy takes it to
the pod), with the certificate the operator keeps in its Secret and the caBundle it keeps
in the chart's webhook configuration."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from nodelib import Kubectl

from spyre_devcluster import node_operator
from spyre_devcluster.kubectl import KubectlError
from spyre_devcluster.node import Node
from spyre_devcluster.simulate import poll_until
from spyre_operator.api.names import CACHE_KIND
from spyre_operator.api.validation import review, validate

pytestmark = pytest.mark.node

WEBHOOK = f"{node_operator.RELEASE}-webhook"  # the chart's names for release spyre-operator
DENIED = "denied the request: "


def test_an_invalid_spyremodel_or_spyrecache_is_refused_by_the_operator_pod(
    operator_node: Node, kubectl: Kubectl, weights: Path
) -> None:
    system = Kubectl(operator_node.kubeconfig, node_operator.NAMESPACE)
    secret = system.get(f"secret/{WEBHOOK}-cert")["data"]
    configuration = system.get(f"validatingwebhookconfiguration/{WEBHOOK}")
    (hook,) = configuration["webhooks"]
    assert hook["clientConfig"]["service"]["name"] == WEBHOOK
    bundle = base64.b64decode(hook["clientConfig"]["caBundle"])
    assert bundle.startswith(base64.b64decode(secret["ca.crt"]))

    doc = node_operator.tiny_model("refused")
    doc["spec"]["extraArgs"] = ["--max-model-len=512"]
    expected = "\n".join(str(p) for p in validate(doc))

    def refusal(*args: str) -> str:
        try:
            kubectl("apply", *args, "-f", "-", input=json.dumps(doc))
        except KubectlError as err:
            return str(err).split(DENIED, 1)[1] if DENIED in str(err) else ""
        return ""

    # a dry run while waiting (failurePolicy Ignore admits it until the webhook answers)
    poll_until(lambda: refusal("--dry-run=server"), "the webhook answers", 120, interval=1.0)
    assert refusal() == expected
    assert expected.startswith("spec.extraArgs[0]: '--max-model-len=...' sets --max-model-len")
    with pytest.raises(KubectlError, match="NotFound"):
        kubectl("get", "spyremodel/refused")
    doc["kind"] = CACHE_KIND  # a precompile request: the same rules, the same text
    assert refusal() == "\n".join(str(p) for p in review(doc).problems) != ""
    with pytest.raises(KubectlError, match="NotFound"):
        kubectl("get", "spyrecache/refused")
    valid = node_operator.tiny_model("admitted")
    out = kubectl("apply", "--dry-run=server", "-f", "-", input=json.dumps(valid))
    assert "created (server dry run)" in out
