"""The admission webhook on the real API server: `kubectl apply` of an invalid SpyreModel is
refused with the text of `spyre-operator validate` (a typo by kubectl's field validation:
the pruning schema drops it before admission), a config the registry does not know is
admitted with a warning; updates too; the failure policies when the operator is down; the
caBundle after a certificate renewal.

The operator runs on the host (`spyre-operator run --webhook-port ...`), so the webhook
configuration reaches it by URL (https://127.0.0.1:PORT); in a cluster the chart points it
at the operator's Service. Its namespaceSelector matches only this module's namespace:
the control plane is shared with the other tests.
"""

from __future__ import annotations

import base64
import datetime
import json
import re
import socket
import ssl
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from cluster_sim import ROOT, condition, free_port, kube_for, wait_for, wait_phase
from cryptography import x509

from spyre_devcluster import simulate
from spyre_devcluster.operator_process import OperatorProcess
from spyre_operator.api.names import CACHE_KIND, CACHE_PLURAL, GROUP, PLURAL, VERSION
from spyre_operator.api.validation import review, validate
from spyre_operator.kube.client import ApiError, Kube, path
from spyre_operator.webhook import certs
from spyre_operator.webhook.keeper import WEBHOOK_CONFIGURATIONS

sys.path.insert(0, str(ROOT / "tests" / "unit"))
from apilib import BASE, merge, with_spec
from test_api_validation import BAD

pytestmark = pytest.mark.integration

SELECTOR_LABEL = "spyre-webhook-test"
DENIED = "denied the request: "
TYPO = with_spec({"tensorParalelSize": 4})
UNKNOWN_CONFIG = with_spec({"batching": {"continuous": {"maxModelLen": 4096, "maxNumSeqs": 4}}})
CROSS_FIELD = with_spec({"env": [{"name": "HOME", "value": "/x"}], "extraArgs": ["--port=1"]})


class Webhooked:
    """A namespace for SpyreModels, the operator serving the webhook for it, and the
    ValidatingWebhookConfiguration (failurePolicy Fail unless a test says otherwise)."""

    def __init__(
        self, kubeconfig: Path, kube: Kube, log: Path, cert_dir: Path | None = None, *flags: str
    ) -> None:
        self.kubeconfig, self.kube, self.log, self.cert_dir = kubeconfig, kube, log, cert_dir
        self.flags = flags  # more of `spyre-operator run`
        suffix = uuid.uuid4().hex[:8]
        self.namespace, self.system = f"wh-{suffix}", f"wh-system-{suffix}"
        self.configuration, self.secret = f"spyre-test-{suffix}", "webhook-cert"
        self.port = free_port()
        for ns, labels in ((self.namespace, {SELECTOR_LABEL: suffix}), (self.system, {})):
            kube.request("POST", "/api/v1/namespaces",
                         {"metadata": {"name": ns, "labels": labels}})  # fmt: skip
        kube.request("POST", WEBHOOK_CONFIGURATIONS, self._configuration(suffix))
        self.process: OperatorProcess | None = None

    def _configuration(self, suffix: str) -> dict[str, Any]:
        rule = {"apiGroups": [GROUP], "apiVersions": [VERSION],
                "resources": [PLURAL, CACHE_PLURAL], "operations": ["CREATE", "UPDATE"],
                "scope": "Namespaced"}  # fmt: skip
        webhook = {
            "name": f"{PLURAL}.{GROUP}",
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "failurePolicy": "Fail",
            "timeoutSeconds": 5,
            "clientConfig": {"url": f"https://127.0.0.1:{self.port}/{PLURAL}"},
            "namespaceSelector": {"matchLabels": {SELECTOR_LABEL: suffix}},
            "rules": [rule],
        }
        return {"metadata": {"name": self.configuration}, "webhooks": [webhook]}

    def start(self) -> None:
        args = ["run", "--namespace", self.namespace, "--webhook-port", str(self.port),
                "--webhook-check-seconds", "1"]  # fmt: skip
        if self.cert_dir is None:  # the operator keeps its certificate (the chart's default)
            args += ["--webhook-secret", f"{self.system}/{self.secret}", "--webhook-host",
                     "127.0.0.1", "--webhook-configuration", self.configuration]  # fmt: skip
        else:  # files someone else keeps (cert-manager), and the caBundle (its cainjector)
            args += ["--webhook-cert-dir", str(self.cert_dir)]
        self.process = OperatorProcess([*args, *self.flags], self.kubeconfig, self.log)
        wait_for(self._serving, "the webhook refuses an invalid SpyreModel")

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()

    def _serving(self) -> bool:
        assert self.process is not None
        self.process.check_alive()
        try:
            self.dry_run(CROSS_FIELD)
        except ApiError as err:
            return DENIED in err.body.get("message", "")
        return False

    def dry_run(self, doc: dict[str, Any]) -> dict[str, Any]:
        body = merge(doc, {"metadata": {"namespace": self.namespace}})
        url = path("SpyreModel", self.namespace)
        return self.kube.request("POST", url, body, query={"dryRun": "All"})

    def set_policy(self, policy: str) -> None:
        """The failurePolicy; while no operator answers, waited for until the API server
        applies it (its cache of webhook configurations lags the write)."""
        self._set("failurePolicy", policy)
        if self.process is None or not self.process.running():
            admits = policy == "Ignore"
            wait_for(lambda: self._admitted_unanswered() == admits, f"failurePolicy {policy}")

    def _admitted_unanswered(self) -> bool:
        try:
            self.dry_run(BASE)
        except ApiError as err:
            if "failed calling webhook" not in err.body.get("message", ""):
                raise
            return False
        return True

    def _set(self, field: str, value: str) -> None:
        patch = [{"op": "add", "path": f"/webhooks/0/{field}", "value": value}]
        url = f"{WEBHOOK_CONFIGURATIONS}/{self.configuration}"
        self.kube.request("PATCH", url, patch, content_type="application/json-patch+json")

    def set_ca_bundle(self, bundle: bytes) -> None:
        self._set("clientConfig/caBundle", base64.b64encode(bundle).decode())

    def ca_bundle(self) -> bytes:
        found = self.kube.request("GET", f"{WEBHOOK_CONFIGURATIONS}/{self.configuration}")
        return base64.b64decode(found["webhooks"][0]["clientConfig"].get("caBundle") or "")

    def stored(self) -> tuple[certs.Certs, str]:
        secret = self.kube.request("GET", f"/api/v1/namespaces/{self.system}/secrets/{self.secret}")
        stored = certs.Certs.from_data(secret["data"])
        assert stored is not None
        return stored, secret["metadata"]["resourceVersion"]

    def remove(self) -> None:
        self.kube.request("DELETE", f"{WEBHOOK_CONFIGURATIONS}/{self.configuration}")
        for ns in (self.namespace, self.system):
            self.kube.request("DELETE", f"/api/v1/namespaces/{ns}")


@pytest.fixture(scope="module")
def hooked(kubeconfig: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Webhooked]:
    with webhooked(kubeconfig, tmp_path_factory.mktemp("webhook") / "operator.log") as running:
        yield running


@contextmanager
def webhooked(kubeconfig: Path, log: Path, *flags: str, start: bool = True) -> Iterator[Webhooked]:
    """A Webhooked (its operator started, with more `flags` of `run`), removed afterwards;
    the operator's log printed if the test fails."""
    kube = kube_for(kubeconfig)
    simulate.install_crds(kube)
    running = Webhooked(kubeconfig, kube, log, None, *flags)
    try:
        if start:
            running.start()
        yield running
    except BaseException:
        print(f"--- operator log ({log}) ---\n{log.read_text(errors='replace')[-6000:]}")
        raise
    finally:
        running.stop()
        running.remove()


def apply(kubectl: Any, hooked: Webhooked, doc: dict[str, Any], *args: str) -> Any:
    named = merge(doc, {"metadata": {"namespace": hooked.namespace}})
    return kubectl("apply", *args, "-f", "-", input=json.dumps(named), check=False)


def refusal(result: Any) -> str:
    """The webhook's text in kubectl's error, every line of it."""
    assert result.returncode != 0, result.stdout
    assert DENIED in result.stderr, result.stderr
    return str(result.stderr.split(DENIED, 1)[1].rstrip("\n"))


def named(doc: dict[str, Any], name: str) -> dict[str, Any]:
    return merge(doc, {"metadata": {"name": name}})


@pytest.mark.parametrize(("patch", "field", "fragment"), BAD.values(), ids=BAD.keys())
def test_held_out_invalid_specs_are_refused_at_kubectl_apply_with_the_validators_text(
    kubectl: Any, hooked: Webhooked, patch: dict[str, Any], field: str, fragment: str
) -> None:
    doc = with_spec(patch)
    result = apply(kubectl, hooked, doc)
    if DENIED in result.stderr:
        assert refusal(result).splitlines() == [str(p) for p in validate(doc)]
    elif "error validating data" in result.stderr or "strict decoding error" in result.stderr:
        # an unknown field, named before admission: by kubectl's validation against the
        # published schema (1.20), or by the API server's strict decoding (1.25 on)
        name = re.sub(r"\[.*", "", field.rsplit(".", 1)[1])
        assert result.returncode != 0
        assert f'"{name}"' in result.stderr or f".{name}" in result.stderr, result.stderr
    else:  # a bound the CRD schema states: the API server refuses before admission
        assert result.returncode != 0 and "is invalid" in result.stderr, result.stderr
        assert re.sub(r"\[[^]]*\]", "", field) in result.stderr, result.stderr  # no indices


def test_every_problem_is_listed_as_validate_prints_it(
    kubectl: Any, hooked: Webhooked, tmp_path: Path
) -> None:
    file = tmp_path / "bad.yaml"
    file.write_text(yaml.safe_dump(named(CROSS_FIELD, "cross")))
    cli = subprocess.run(
        [sys.executable, "-m", "spyre_operator", "validate", str(file)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert cli.returncode == 2
    prefix = f"{file}: cross: "
    expected = [line.removeprefix(prefix) for line in cli.stderr.splitlines()]
    assert len(expected) == 2
    assert refusal(apply(kubectl, hooked, named(CROSS_FIELD, "cross"))).splitlines() == expected


# What crashed validation or slipped past it in the fuzz run (issue 18), as JSON reaches the
# webhook: the refusal is validate's text, and short. (Longer values than these are refused
# by the CRD's size bounds before the webhook: version 64 characters, an argument 32 KiB.)
HOSTILE = {
    "cpu 1e400": {"resources": {"limits": {"cpu": "1e400"}}},
    "60-digit version": {"runtime": {"version": "1" * 60 + ".0.0"}},
    "underscore flag": {"extraArgs": ["--max_model_len=4096"]},
    "flag as a served name": {"model": {"servedName": "--port"}},
    "a 30,000-character argument": {"extraArgs": ["--max_model_len=" + "9" * 30_000]},
    "toleration Exists with a value": {"tolerations": [{"operator": "Exists", "value": "x"}]},
    "image with spaces": {"image": " quay.io/x:1 "},
}


@pytest.mark.parametrize("patch", HOSTILE.values(), ids=HOSTILE.keys())
def test_hostile_specs_are_refused_with_the_validators_short_text(
    kubectl: Any, hooked: Webhooked, patch: dict[str, Any]
) -> None:
    doc = with_spec(patch)
    text = refusal(apply(kubectl, hooked, doc))
    assert text.splitlines() == [str(p) for p in validate(doc)]
    assert len(text) < 1000, text


def test_a_typo_is_refused_by_kubectl_and_never_reaches_the_webhook(
    kubectl: Any, hooked: Webhooked
) -> None:
    """The API server prunes unknown fields as it decodes, before admission: kubectl's field
    validation names them (its default); without it the model is stored without them."""
    result = apply(kubectl, hooked, named(TYPO, "typo"))
    # named by kubectl (1.20) or by the API server's strict decoding (1.25 on: its path)
    assert re.search(r'unknown field "(spec\.)?tensorParalelSize"', result.stderr), result.stderr
    assert DENIED not in result.stderr
    result = apply(kubectl, hooked, named(TYPO, "typo"), "--validate=false")
    assert result.returncode == 0, result.stderr
    stored = hooked.kube.get("SpyreModel", hooked.namespace, "typo")
    assert stored is not None and "tensorParalelSize" not in stored["spec"]


def test_spyrecaches_are_checked_too(kubectl: Any, hooked: Webhooked) -> None:
    # a precompile request is refused with the same text, and a valid one is admitted
    bad = merge(named(CROSS_FIELD, "bad-cache"), {"kind": CACHE_KIND})
    problems = [str(p) for p in review(bad).problems]
    assert refusal(apply(kubectl, hooked, bad)).splitlines() == problems
    assert len(problems) == 2
    good = merge(named(BASE, "good-cache"), {"kind": CACHE_KIND})
    result = apply(kubectl, hooked, good)
    assert result.returncode == 0, result.stderr
    assert hooked.kube.get(CACHE_KIND, hooked.namespace, "good-cache") is not None


def test_a_config_the_registry_does_not_know_is_admitted_with_a_warning(
    kubectl: Any, hooked: Webhooked
) -> None:
    result = apply(kubectl, hooked, named(UNKNOWN_CONFIG, "unknown-config"))
    assert result.returncode == 0, result.stderr
    assert f"Warning: {review(UNKNOWN_CONFIG).warning}" in result.stderr
    assert "created" in result.stdout


def test_updates_are_validated_and_spec_preserving_updates_pass(
    kubectl: Any, hooked: Webhooked
) -> None:
    doc = named(BASE, "updated")
    assert apply(kubectl, hooked, doc).returncode == 0
    bad = merge(doc, {"spec": {"extraArgs": ["--max-model-len=4096"]}})
    assert refusal(apply(kubectl, hooked, bad)) == (
        "spec.extraArgs[0]: '--max-model-len=...' sets --max-model-len, which the operator "
        "renders: set spec.batching.continuous.maxModelLen instead"
    )
    stored = hooked.kube.get("SpyreModel", hooked.namespace, "updated")
    assert stored is not None and stored["metadata"]["generation"] == 1
    ns = ("-n", hooked.namespace)
    kubectl("label", *ns, "sm", "updated", "team=a")
    kubectl("scale", *ns, "sm", "updated", "--replicas=2")  # the scale subresource
    good = merge(doc, {"spec": {"replicas": 2, "batching": {"continuous": {"maxNumSeqs": 8}}}})
    assert apply(kubectl, hooked, good).returncode == 0


def test_dry_run_server_of_an_invalid_example_shows_the_refusal(
    kubectl: Any, hooked: Webhooked, tmp_path: Path
) -> None:
    doc = yaml.safe_load((ROOT / "examples" / "granite-3.3-8b-instruct.yaml").read_text())
    doc["spec"]["accelerator"] = {"count": 2}
    file = tmp_path / "example.yaml"
    file.write_text(yaml.safe_dump(doc))
    result = kubectl("apply", "--dry-run=server", "-n", hooked.namespace, "-f", str(file),
                     check=False)  # fmt: skip
    assert refusal(result) == (
        "spec.accelerator.count: must equal tensorParallelSize (4), one Spyre card per "
        "tensor-parallel rank: set 4 or leave it unset"
    )
    name = doc["metadata"]["name"]
    assert hooked.kube.get("SpyreModel", hooked.namespace, name) is None


def test_admitted_while_unvalidated_the_operator_reports_invalid_spec_and_writes_status(
    kubectl: Any, hooked: Webhooked
) -> None:
    # the failure policy Ignore (the chart's default) with the operator stopped: a typo and
    # a broken rule are admitted, and the restarted operator's status says what is wrong
    hooked.stop()
    hooked.set_policy("Ignore")
    try:
        # nothing listens: the API server's call is refused at once, no wait for the timeout
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", hooked.port), timeout=5).close()
        result = apply(kubectl, hooked, named(CROSS_FIELD, "admitted"))
        assert result.returncode == 0, result.stderr
    finally:
        hooked.set_policy("Fail")
        hooked.start()
    status = wait_phase(hooked.kube, hooked.namespace, "admitted", "Invalid")
    kind, reason, message = condition(status, "Degraded")  # a status write: not refused
    assert (kind, reason) == ("True", "InvalidSpec")
    assert str(validate(CROSS_FIELD)[0]) in message
    # still editable and deletable, although its spec is invalid
    kubectl("annotate", "-n", hooked.namespace, "sm", "admitted", "note=seen")
    kubectl("delete", "-n", hooked.namespace, "sm", "admitted")


def test_failure_policy_fail_refuses_every_write_while_the_operator_is_down(
    kubectl: Any, hooked: Webhooked
) -> None:
    hooked.stop()
    try:
        result = apply(kubectl, hooked, named(BASE, "while-down"))
        assert result.returncode != 0
        assert "failed calling webhook" in result.stderr, result.stderr
    finally:
        hooked.start()
    assert apply(kubectl, hooked, named(BASE, "while-down")).returncode == 0


def _served_certificate(port: int) -> x509.Certificate:
    pem = ssl.get_server_certificate(("127.0.0.1", port), timeout=10)
    return x509.load_pem_x509_certificate(pem.encode())


def test_a_restart_keeps_the_certificate(hooked: Webhooked) -> None:
    before, version = hooked.stored()
    hooked.stop()
    hooked.start()
    assert hooked.stored() == (before, version)
    assert hooked.ca_bundle() == before.ca_cert + before.previous_ca


def test_a_renewed_certificate_is_served_and_trusted_through_the_ca_bundle(
    kubectl: Any, hooked: Webhooked
) -> None:
    # a certificate at 3/4 of its life: the operator's next check (every second) renews it
    now = datetime.datetime.now(datetime.UTC)
    aged = certs.issue(["127.0.0.1"], now - certs.LIFETIME * 3 / 4)
    url = f"/api/v1/namespaces/{hooked.system}/secrets/{hooked.secret}"
    hooked.kube.request("PATCH", url, {"data": aged.to_data()},
                        content_type="application/merge-patch+json")  # fmt: skip

    def renewed() -> certs.Certs | None:
        stored, _ = hooked.stored()
        return stored if stored.previous_ca == aged.ca_cert else None

    new = wait_for(renewed, "the operator renews the aged certificate")
    assert certs.renewal_due(new, ["127.0.0.1"], now) is None
    wait_for(lambda: hooked.ca_bundle() == new.ca_cert + aged.ca_cert, "the caBundle trusts it")
    expected = x509.load_pem_x509_certificate(new.cert)
    wait_for(lambda: _served_certificate(hooked.port) == expected, "the webhook serves it")
    assert refusal(apply(kubectl, hooked, CROSS_FIELD)).startswith("spec.env[0].name")


def test_a_certificate_kept_by_someone_else_is_served_and_reloaded_from_its_files(
    kubeconfig: Path, kubectl: Any, tmp_path: Path
) -> None:
    # the chart with cert-manager: its Secret mounted into the pod (the kubelet replaces
    # the files when cert-manager renews it) and its cainjector keeping the caBundle
    cert_dir = tmp_path / "certs"
    cert_dir.mkdir()
    now = datetime.datetime.now(datetime.UTC)
    first, second = certs.issue(["127.0.0.1"], now), certs.issue(["127.0.0.1"], now)

    def mount(made: certs.Certs) -> None:
        (cert_dir / "tls.crt").write_bytes(made.cert)
        (cert_dir / "tls.key").write_bytes(made.key)

    mount(first)
    running = Webhooked(kubeconfig, kube_for(kubeconfig), tmp_path / "operator.log", cert_dir)
    running.set_ca_bundle(first.ca_cert + second.ca_cert)
    try:
        running.start()
        assert refusal(apply(kubectl, running, CROSS_FIELD)).startswith("spec.env[0].name")
        # caught halfway through a replacement: the new certificate with the old key
        (cert_dir / "tls.crt").write_bytes(second.cert)
        wait_for(lambda: "kept the certificate served" in running.log.read_text(), "a check")
        assert running.process is not None and running.process.running()
        assert _served_certificate(running.port) == x509.load_pem_x509_certificate(first.cert)
        mount(second)
        expected = x509.load_pem_x509_certificate(second.cert)
        wait_for(lambda: _served_certificate(running.port) == expected, "the renewed files")
        assert refusal(apply(kubectl, running, CROSS_FIELD)).startswith("spec.env[0].name")
        found = running.kube.request("GET", f"/api/v1/namespaces/{running.system}/secrets")
        assert all(s["metadata"]["name"] != running.secret for s in found["items"])  # untouched
    except BaseException:
        print(running.log.read_text(errors="replace")[-4000:])
        raise
    finally:
        running.stop()
        running.remove()
