"""The chart's cert-manager option with cert-manager itself (spyre_devcluster/certmanager.py:
its controller and cainjector, built from its Go module, as host processes) on an API
server of its own: the chart's Issuer and Certificate are issued, the cainjector writes
the CA into the chart's webhook configuration, the API server reaches the operator's
webhook through the chart's Service with that CA and the webhook refuses an invalid
SpyreModel; after a renewal (what `cmctl renew` does) admission keeps working; the
Secret is never in the chart's output.

The test plays the kubelet (it writes the Secret's files into the operator's
--webhook-cert-dir, as the pod's Secret volume would) and the endpoints controller (the
Service's Endpoints name this host: the API server routes to endpoints, with
--enable-aggregator-routing, as there is no kube-proxy)."""

from __future__ import annotations

import base64
import json
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from chartlib import ROOT, find, render

from spyre_devcluster import simulate
from spyre_devcluster.certmanager import CertManager, crd_files
from spyre_devcluster.controlplane import ControlPlane, Profile, free_port
from spyre_devcluster.operator_process import OperatorProcess
from spyre_devcluster.tools import tool
from spyre_operator.api.validation import validate
from spyre_operator.kube.client import ApiError, Kube, load_api_client, path

pytestmark = pytest.mark.chart

SYSTEM, MODELS = "spyre-system", "models"
VALUES = {"webhook.certificates.source": "cert-manager"}
WAIT = 180.0  # cert-manager's first issuance on a loaded 2-core machine
DENIED = "denied the request: "
CERTIFICATES = f"/apis/cert-manager.io/v1/namespaces/{SYSTEM}/certificates"


def invalid_model(name: str) -> dict[str, Any]:
    """The CPU example with an environment variable the operator owns (refused)."""
    doc: dict[str, Any] = yaml.safe_load((ROOT / "examples" / "micro-granite-cpu.yaml").read_text())
    doc["metadata"] = {"name": name, "namespace": MODELS}
    doc["spec"]["env"] = [{"name": "VLLM_PLUGINS", "value": "x"}]
    return doc


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    routed = Profile(apiserver_args=("--enable-aggregator-routing=true",))
    with ControlPlane(tmp_path_factory.mktemp("cert-manager-plane"), routed) as plane:
        yield plane


@pytest.fixture(scope="module")
def kube(plane: ControlPlane) -> Kube:
    return Kube(load_api_client(str(plane.kubeconfig)))


@pytest.fixture(scope="module")
def cert_manager(
    plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[CertManager]:
    for crd in crd_files():
        kubectl(plane, "apply", "--server-side", "-f", str(crd))
    running = CertManager(plane.kubeconfig, tmp_path_factory.mktemp("cert-manager"))
    try:
        yield running
        running.check_alive()
    finally:
        running.stop()


def kubectl(plane: ControlPlane, *args: str, input: str | None = None) -> str:
    result = subprocess.run(
        [tool("kubectl"), "--kubeconfig", str(plane.kubeconfig), *args],
        input=input, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 0, f"kubectl {' '.join(args)}: {result.stderr}"
    return result.stdout


def host_address() -> str:
    """This host's address on its default route (an Endpoints address may not be loopback)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect(("192.0.2.1", 9))  # no packet is sent: the kernel picks the route
        address: str = probe.getsockname()[0]
        return address


def test_the_chart_renders_the_certificate_and_never_its_secret() -> None:
    docs = render(SYSTEM, VALUES)
    assert not find(docs, "Secret"), [d["metadata"]["name"] for d in find(docs, "Secret")]
    (certificate,) = find(docs, "Certificate")
    (configuration,) = find(docs, "ValidatingWebhookConfiguration")
    name = certificate["metadata"]["name"]
    assert configuration["metadata"]["annotations"] == {
        "cert-manager.io/inject-ca-from": f"{SYSTEM}/{name}"
    }


class Webhook:
    """The chart's webhook objects on the plane, and the operator serving them."""

    def __init__(
        self, plane: ControlPlane, kube: Kube, cert_manager: CertManager, folder: Path
    ) -> None:
        self.plane, self.kube, self.folder = plane, kube, folder
        self.cert_manager = cert_manager
        docs = render(SYSTEM, VALUES)
        ours = [d for d in docs if d["kind"] in ("Issuer", "Certificate", "Service",
                                                   "ValidatingWebhookConfiguration")]  # fmt: skip
        (self.certificate,) = find(ours, "Certificate")
        self.name = self.certificate["metadata"]["name"]
        self.secret = self.certificate["spec"]["secretName"]
        for namespace in (SYSTEM, MODELS):
            kubectl(plane, "create", "namespace", namespace)
        kubectl(plane, "apply", "-f", "-", input=json.dumps({"kind": "List", "apiVersion": "v1",
                                                           "items": ours}))  # fmt: skip
        self.port = free_port()
        (self.folder / "certs").mkdir()
        self.operator: OperatorProcess | None = None

    def issued(self) -> dict[str, bytes]:
        """The Secret once cert-manager wrote it (its Certificate Ready)."""

        def ready() -> dict[str, Any] | None:
            self.cert_manager.check_alive()
            found = self.kube.request("GET", f"{CERTIFICATES}/{self.name}")
            conditions = (found.get("status") or {}).get("conditions") or []
            done = any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
            return found if done else None

        simulate.poll_until(ready, f"Certificate {self.name} Ready", WAIT)
        secret = self.kube.request("GET", f"/api/v1/namespaces/{SYSTEM}/secrets/{self.secret}")
        return {k: base64.b64decode(v) for k, v in secret["data"].items()}

    def bundle(self) -> bytes:
        self.cert_manager.check_alive()
        url = f"/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/{self.name}"
        hook = self.kube.request("GET", url)["webhooks"][0]
        return base64.b64decode(hook["clientConfig"].get("caBundle") or "")

    def injected(self, ca: bytes, what: str, old: bytes = b"") -> None:
        """Wait until the caBundle holds `ca` (after a renewal the cainjector keeps the old
        CA beside it, so the certificate still served stays trusted); a timeout says what
        it holds instead."""
        seen = [b""]

        def probe() -> bool:
            seen[0] = self.bundle()
            return ca in seen[0]

        try:
            simulate.poll_until(probe, what, WAIT)
        except simulate.Timeout as timeout:
            held = "only the old CA" if seen[0] == old else f"{seen[0]!r}"
            raise simulate.Timeout(f"{timeout}; the caBundle holds {held}") from None

    def mount(self, data: dict[str, bytes]) -> None:
        """The Secret volume's files, each replaced whole, as the kubelet does."""
        for name in ("tls.crt", "tls.key", "ca.crt"):
            part = self.folder / "certs" / f".{name}"
            part.write_bytes(data[name])
            part.replace(self.folder / "certs" / name)

    def serve(self) -> None:
        """The operator's webhook on this host, the Service's Endpoints pointing at it."""
        address = host_address()
        endpoints = {  # what the resolver reads up to 1.3x
            "apiVersion": "v1",
            "kind": "Endpoints",
            "metadata": {"name": self.name, "namespace": SYSTEM},
            "subsets": [{"addresses": [{"ip": address}],
                         "ports": [{"name": "webhook", "port": self.port}]}],
        }  # fmt: skip
        slice_ = {  # and what it reads since (no controller mirrors the Endpoints here)
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {"name": self.name, "namespace": SYSTEM,
                         "labels": {"kubernetes.io/service-name": self.name}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": [address], "conditions": {"ready": True}}],
            "ports": [{"name": "webhook", "port": self.port, "protocol": "TCP"}],
        }  # fmt: skip
        for doc in (endpoints, slice_):
            kubectl(self.plane, "apply", "-f", "-", input=json.dumps(doc))
        certs = str(self.folder / "certs")
        args = ["run", "--namespace", MODELS, "--webhook-port", str(self.port),
                "--webhook-cert-dir", certs, "--webhook-check-seconds", "1"]  # fmt: skip
        self.operator = OperatorProcess(args, self.plane.kubeconfig, self.folder / "op.log")

    def refusal(self, name: str) -> str | None:
        """The webhook's refusal of an invalid SpyreModel (a dry run), or None if admitted."""
        assert self.operator is not None
        self.operator.check_alive()
        try:
            self.kube.request("POST", path("SpyreModel", MODELS), invalid_model(name),
                              query={"dryRun": "All"})  # fmt: skip
        except ApiError as err:
            message: str = err.body.get("message", "")
            return message.split(DENIED, 1)[1] if DENIED in message else None
        return None  # admitted: failurePolicy Ignore while the webhook cannot be reached

    def renew(self) -> None:
        """What `cmctl renew` does: the Certificate's Issuing condition, set by hand."""
        found = self.kube.request("GET", f"{CERTIFICATES}/{self.name}")
        conditions = [c for c in found["status"]["conditions"] if c["type"] != "Issuing"]
        conditions.append({"type": "Issuing", "status": "True", "reason": "ManuallyTriggered",
                           "message": "renewal asked by the test"})  # fmt: skip
        url = f"{CERTIFICATES}/{self.name}/status"
        self.kube.request("PATCH", url, {"status": {"conditions": conditions}},
                          content_type="application/merge-patch+json")  # fmt: skip

    def stop(self) -> None:
        if self.operator is not None:
            self.operator.stop()


@pytest.fixture
def webhook(
    plane: ControlPlane, kube: Kube, cert_manager: CertManager, tmp_path: Path
) -> Iterator[Webhook]:
    simulate.install_crds(kube)
    made = Webhook(plane, kube, cert_manager, tmp_path)
    try:
        yield made
    finally:
        made.stop()


def test_cert_manager_issues_the_webhooks_certificate_and_admission_survives_a_renewal(
    webhook: Webhook,
) -> None:
    first = webhook.issued()
    webhook.injected(first["ca.crt"], "the cainjector's caBundle")
    webhook.mount(first)
    webhook.serve()
    expected = "\n".join(str(p) for p in validate(invalid_model("bad")))
    assert expected.startswith("spec.env[0].name"), expected
    refused = simulate.poll_until(lambda: webhook.refusal("bad"), "the webhook refuses", WAIT)
    assert refused == expected

    webhook.renew()

    def renewed() -> dict[str, bytes] | None:
        now = webhook.issued()
        return now if now["tls.crt"] != first["tls.crt"] else None

    second = simulate.poll_until(renewed, "a renewed certificate", WAIT)
    assert second["tls.key"] != first["tls.key"]  # rotationPolicy Always: a new key
    webhook.injected(second["ca.crt"], "the renewed CA in the caBundle", first["ca.crt"])
    webhook.mount(second)
    refused = simulate.poll_until(lambda: webhook.refusal("bad"), "refused after renewal", WAIT)
    assert refused == expected
