"""The admission webhook's answers (the validator's verdict) and its certificates."""

from __future__ import annotations

import datetime
import ipaddress
from typing import Any

import pytest
from apilib import BASE, merge, with_spec
from cryptography import x509

from spyre_operator.api.validation import review, validate
from spyre_operator.settings import SettingsError, from_env
from spyre_operator.webhook import certs
from spyre_operator.webhook.review import Answer, answer

pytestmark = pytest.mark.unit

NOW = datetime.datetime(2026, 11, 23, 12, 0, tzinfo=datetime.UTC)
INVALID = with_spec({"tensorParalelSize": 4, "replicas": -1})  # field problems
CROSS_FIELD = with_spec({"env": [{"name": "HOME", "value": "/x"}], "extraArgs": ["--port=1"]})
UNKNOWN_CONFIG = with_spec({"batching": {"continuous": {"maxModelLen": 4096, "maxNumSeqs": 4}}})


def test_a_create_is_refused_with_every_problem_of_the_validator_one_per_line() -> None:
    refusal = answer("CREATE", INVALID, None).refusal
    assert refusal is not None
    assert refusal.splitlines() == [str(p) for p in validate(INVALID)]
    assert "spec.tensorParalelSize: unknown field: did you mean tensorParallelSize?" in refusal
    assert "spec.replicas: must be at least 0, got -1" in refusal
    lines = (answer("CREATE", CROSS_FIELD, None).refusal or "").splitlines()
    assert lines == [str(p) for p in validate(CROSS_FIELD)]
    assert [line.split(":")[0] for line in lines] == ["spec.env[0].name", "spec.extraArgs[0]"]


def test_a_valid_model_is_admitted_with_the_known_config_warning() -> None:
    verdict = answer("CREATE", UNKNOWN_CONFIG, None)
    assert verdict.refusal is None
    assert verdict.warnings == [review(UNKNOWN_CONFIG).warning]
    assert "is not in sendnn-inference 2.6.3's known-config registry" in verdict.warnings[0]
    assert answer("CREATE", BASE, None) == Answer()  # known config: nothing to say


def test_an_update_is_checked_when_it_changes_the_spec() -> None:
    assert answer("UPDATE", INVALID, BASE).refusal is not None
    assert answer("UPDATE", UNKNOWN_CONFIG, BASE).warnings


def test_an_update_that_leaves_the_spec_alone_is_admitted_even_if_the_spec_is_invalid() -> None:
    # admitted while the webhook was away: labels, finalizers, deletion must still work
    labelled = merge(INVALID, {"metadata": {"labels": {"team": "a"}, "finalizers": ["x/y"]}})
    assert answer("UPDATE", labelled, INVALID) == Answer()
    assert answer("DELETE", INVALID, INVALID) == Answer()


def _cert(pem: bytes) -> x509.Certificate:
    return x509.load_pem_x509_certificate(pem)


def test_issue_makes_a_ca_and_a_serving_certificate_for_the_hosts() -> None:
    hosts = ["spyre-operator-webhook.spyre-system.svc", "127.0.0.1"]
    made = certs.issue(hosts, NOW)
    ca, cert = _cert(made.ca_cert), _cert(made.cert)
    certs.check_issued_by(cert, ca)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == [hosts[0]]
    assert san.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    assert certs.validity(cert)[1] - NOW == certs.LIFETIME
    assert certs.renewal_due(made, hosts, NOW) is None
    assert certs.Certs.from_data(made.to_data()) == made


def test_renewal_is_due_at_two_thirds_of_the_lifetime_for_new_hosts_or_broken_data() -> None:
    made = certs.issue(["a.svc"], NOW)
    start = NOW - certs.BACKDATE
    due = start + (certs.LIFETIME + certs.BACKDATE) * 2 / 3
    assert certs.renewal_due(made, ["a.svc"], due - datetime.timedelta(seconds=1)) is None
    assert "renewed at 2/3" in (certs.renewal_due(made, ["a.svc"], due) or "")
    assert "not for exactly b.svc" in (certs.renewal_due(made, ["b.svc"], NOW) or "")
    other = certs.issue(["a.svc"], NOW)
    mixed = certs.Certs(other.ca_cert, other.ca_key, made.cert, made.key)
    assert "not signed by the stored CA" in (certs.renewal_due(mixed, ["a.svc"], NOW) or "")
    assert certs.Certs.from_data({"tls.crt": "not base64!"}) is None
    assert certs.Certs.from_data({}) is None


def test_the_bundle_keeps_the_previous_ca_until_it_expires() -> None:
    old = certs.issue(["a.svc"], NOW)
    new = certs.issue(["a.svc"], NOW, previous_ca=old.ca_cert)
    assert certs.bundle(new, NOW) == new.ca_cert + old.ca_cert
    assert certs.bundle(new, NOW + certs.LIFETIME) == new.ca_cert
    assert certs.bundle(old, NOW) == old.ca_cert


@pytest.mark.parametrize(
    ("env", "error"),
    [
        ({}, "exactly one certificate source"),
        ({"SECRET": "ns/name", "CERT_DIR": "/certs"}, "exactly one certificate source"),
        ({"SECRET": "name", "HOSTS": "h"}, "use NAMESPACE/NAME"),
        ({"SECRET": "ns/name"}, "needs --webhook-host"),
    ],
)
def test_webhook_settings_say_what_is_missing(env: dict[str, str], error: str) -> None:
    environ = {"SPYRE_OPERATOR_WEBHOOK_PORT": "9443"}
    environ |= {f"SPYRE_OPERATOR_WEBHOOK_{key}": value for key, value in env.items()}
    with pytest.raises(SettingsError, match=error):
        from_env(environ)


def test_webhook_settings() -> None:
    assert from_env({}).webhook_port == 0  # off
    values: dict[str, Any] = {"PORT": "9443", "SECRET": "sys/cert", "HOSTS": "a.svc,127.0.0.1",
                              "CONFIGURATION": "spyre"}  # fmt: skip
    config = from_env({f"SPYRE_OPERATOR_WEBHOOK_{key}": value for key, value in values.items()})
    assert (config.webhook_port, config.webhook_secret_ref, config.webhook_configuration) == (
        9443, ("sys", "cert"), "spyre"
    )  # fmt: skip
    assert (config.webhook_hosts, config.webhook_cert_dir) == (("a.svc", "127.0.0.1"), None)
