"""Where the webhook's certificate comes from: kept by the operator in a Secret (and the
webhook configuration's caBundle kept current), or read from files someone else keeps
(cert-manager's Secret mounted into the pod; its cainjector sets the caBundle)."""

from __future__ import annotations

import base64
import datetime
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from spyre_operator.kube.client import STRATEGIC, ApiError, Kube
from spyre_operator.webhook import certs

log = logging.getLogger(__name__)

WEBHOOK_CONFIGURATIONS = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"
Clock = Callable[[], datetime.datetime]


def utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


class CertSource(Protocol):
    def current(self) -> tuple[bytes, bytes]:
        """The serving certificate (chain) and its key, PEM."""


class CertDirectory:
    """`tls.crt` and `tls.key` in a directory (a mounted cert-manager Secret: the kubelet
    replaces the files when cert-manager renews it)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def current(self) -> tuple[bytes, bytes]:
        return (self.directory / certs.CERT).read_bytes(), (self.directory / certs.KEY).read_bytes()


class SecretKeeper:
    """The operator's own CA and serving certificate in Secret `namespace/name`: issued when
    missing, renewed when due, and trusted by the ValidatingWebhookConfiguration
    `configuration` (its caBundle). Every call of `current` checks all of it, so it is
    also the periodic check; it writes only what is out of date."""

    def __init__(
        self,
        kube: Kube,
        secret: tuple[str, str],
        configuration: str | None,
        hosts: Sequence[str],
        clock: Clock = utcnow,
    ) -> None:
        self.kube, self.configuration, self.hosts, self.clock = kube, configuration, hosts, clock
        self.namespace, self.name = secret
        self.url = f"/api/v1/namespaces/{self.namespace}/secrets/{self.name}"

    def current(self) -> tuple[bytes, bytes]:
        now = self.clock()
        kept = self._read()
        if kept is None:  # outside the chart (which creates it empty): needs `create`
            issued = certs.issue(self.hosts, now)
            self.kube.request(
                "POST",
                f"/api/v1/namespaces/{self.namespace}/secrets",
                {
                    "apiVersion": "v1",
                    "kind": "Secret",
                    "type": "Opaque",
                    "metadata": {"name": self.name, "namespace": self.namespace},
                    "data": issued.to_data(),
                },
            )
            log.info(
                "webhook: issued a certificate for %s in Secret %s/%s",
                ", ".join(self.hosts),
                self.namespace,
                self.name,
            )
        else:
            stored, version = kept
            why = (
                "the Secret holds none"
                if stored is None
                else certs.renewal_due(stored, self.hosts, now)
            )
            if why is None:
                assert stored is not None
                issued = stored
            else:
                issued = certs.issue(self.hosts, now, previous_ca=stored.ca_cert if stored else b"")
                # guarded by the resourceVersion read: a 409 fails this check, the next redoes it
                self.kube.request(
                    "PATCH",
                    self.url,
                    {"metadata": {"resourceVersion": version}, "data": issued.to_data()},
                    content_type="application/merge-patch+json",
                )
                log.info(
                    "webhook: renewed the certificate in Secret %s/%s: %s",
                    self.namespace,
                    self.name,
                    why,
                )
        self._trust(certs.bundle(issued, now))
        return issued.cert, issued.key

    def _read(self) -> tuple[certs.Certs | None, str] | None:
        """The stored certificates (None: unusable) and the Secret's resourceVersion; None
        when there is no Secret."""
        try:
            secret = self.kube.request("GET", self.url)
        except ApiError as err:
            if err.not_found:
                return None
            raise
        return certs.Certs.from_data(secret.get("data")), secret["metadata"]["resourceVersion"]

    def _trust(self, bundle: bytes) -> None:
        """Every webhook of the configuration carries `bundle` as its caBundle."""
        if self.configuration is None:
            return
        url = f"{WEBHOOK_CONFIGURATIONS}/{self.configuration}"
        encoded = base64.b64encode(bundle).decode()
        try:
            found = self.kube.request("GET", url)
        except ApiError as err:
            if not err.not_found:
                raise
            log.warning("webhook: configuration %s not found (yet)", self.configuration)
            return
        webhooks: list[dict[str, Any]] = found.get("webhooks") or []
        stale = [w["name"] for w in webhooks if w["clientConfig"].get("caBundle") != encoded]
        if stale:  # a strategic merge patch: the list is merged by webhook name
            trusted = {"caBundle": encoded}
            patch = {"webhooks": [{"name": n, "clientConfig": trusted} for n in stale]}
            self.kube.request("PATCH", url, patch, content_type=STRATEGIC)
            log.info("webhook: set the caBundle of %s (%s)", self.configuration, ", ".join(stale))
