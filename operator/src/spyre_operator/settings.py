"""The operator's settings, defined once: each is a field of `Settings` with its type,
default, bounds and help. The `run` flags (cli/run.py), the environment variables (for
`kopf run -m spyre_operator.handlers`, and the flags' fallback) and the chart's values and
their schema (cli/render.py) are all derived from these fields (tests/chart checks the
chart against them). A frozen value: the reconcile gets it as an argument. No kopf import:
the CLI builds its flags without loading the operator."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator, model_validator
from pydantic.alias_generators import to_camel

from spyre_operator.api import runtimes
from spyre_operator.api.base import DNS_SUBDOMAIN
from spyre_operator.api.runtimes import (
    IMAGE_REPOSITORY,
    PLATFORMS,
    CacheSharing,
    Platform,
    RuntimeImages,
)
from spyre_operator.setting import Names, Port, setting
from spyre_runtime.contract import HEARTBEAT_SECONDS
from spyre_runtime.ociregistry import RegistryError, Repository

ENV_PREFIX = "SPYRE_OPERATOR_"


class Settings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    namespaces: Names = setting(
        "watch only this namespace (repeatable; default: all namespaces)",
        flag="namespace",
        short="-n",
        default=(),
        metavar="NS",
    )
    kubeconfig: str | None = setting(
        "kubeconfig file (default: in-cluster)", env="KUBECONFIG", metavar="FILE", default=None
    )
    metrics_port: Port = setting(
        "serve Prometheus metrics on this port (0: off)", metavar="PORT", default=0
    )
    # A level-based safety net against lost watch events; spread over the period, so its
    # cost is a steady trickle of reads from the stores (docs/operator.md, "Resync").
    resync_seconds: float = setting(
        "reconcile every SpyreModel and SpyreCache once in this period, spread evenly over it",
        chart=True,
        gt=0,
        default=300.0,
        metavar="SECONDS",
    )
    workers: int = setting("threads for reconciles", chart=True, ge=1, default=16, metavar="N")
    # A compile holds CPU and memory (or cards) for 20-60 min: a few at once, the rest queue.
    max_compiles: int = setting(
        "compile Jobs running at once in the watched namespaces; the rest wait in status "
        "(CacheReady reason Queued), oldest SpyreModel first; 0: unlimited",
        chart=True,
        ge=0,
        default=4,
        metavar="N",
    )
    max_compiles_per_namespace: int = setting(
        "compile Jobs running at once in one namespace; 0: unlimited",
        chart=True,
        ge=0,
        default=0,
        metavar="N",
    )
    # The compile pod logs its step at least this often (its heartbeat): reading more often
    # would show the same step.
    progress_seconds: float = setting(
        "how often a running compile's progress (status.cache.progress) is read from the "
        "end of its pod's log (needs get on pods/log); 0: never",
        chart=True,
        ge=0,
        default=float(HEARTBEAT_SECONDS),
        metavar="SECONDS",
    )
    # A key costs disk (GBs) while unused and a compile (20-60 min of CPU or cards) when it
    # is needed again: a week keeps what a fleet rolled away from over a weekend or a
    # release cycle, and still frees it within one.
    cache_retention: str = setting(
        "remove a cache key from its volume this long after the last SpyreModel using it "
        "went (a clean-up Job; never a key in use, compiling or asked for by a SpyreCache of "
        "yours), e.g. 7d, 12h, 30m; 0: never",
        chart=True,
        default="7d",
        metavar="DURATION",
        pattern=runtimes.DURATION.pattern,
    )
    platform: Platform = setting(
        "where the compile and serving pods run: openshift leaves their fsGroup to the "
        "restricted-v2 SCC",
        chart=True,
        default=PLATFORMS[0],
    )
    runtime_image_repository: str = setting(
        "the serving images' repository, e.g. a mirror or an air-gapped copy: a SpyreModel "
        "without spec.image runs REPOSITORY:<operator version>-<flavour>-<version>; moving it "
        "keeps every cache key",
        default=IMAGE_REPOSITORY,
        metavar="REPOSITORY",
    )
    runtime_image_pull_secrets: Names = setting(
        "a docker-registry Secret every workload pod pulls with, before the SpyreModel's own "
        "imagePullSecrets; create it in each namespace with SpyreModels (the kubelet pulls "
        "without a missing one) (repeatable)",
        flag="runtime-image-pull-secret",
        default=(),
        metavar="NAME",
    )
    # A release publishes CPU serving images only (no registry we reach has IBM's Spyre
    # base): its chart says false, so a card model names IBM's or Red Hat's image.
    runtime_image_cards: bool = setting(
        "the serving images' repository has images for Spyre cards; false: a SpyreModel on "
        "cards (backend sendnn) without spec.image is refused, by the webhook and in its "
        "status (InvalidSpec), with what to set",
        default=True,
        metavar="true|false",
    )
    runtime_injector_image: str | None = setting(
        "the operator's image, whose init container brings spyre-runtime to an image of an "
        "upstream runtime.imageProfile (an air-gapped copy, a digest); unset: "
        "<the serving repository's parent>/operator:<operator version>, where a release "
        "puts it",
        default=None,
        metavar="IMAGE",
    )
    # A key compiles once per fleet: every cluster and namespace with the registry pulls
    # what one of them compiled (docs/cache-sharing.md).
    cache_registry: str = setting(
        "share compiled caches through this OCI repository (host[:port]/path): a cache key "
        "is pulled from it (a pull Job, no card) before it would compile, and a finished "
        "compile publishes its key there; empty: off",
        chart=True,
        default="",
        metavar="REPOSITORY",
    )
    cache_registry_secret: str = setting(
        "the Secret the pull and compile Jobs mount for --cache-registry, in each namespace "
        "with SpyreModels: .dockerconfigjson (the credentials, as `kubectl create secret "
        "docker-registry` writes it) and, for a private certificate, ca.crt; empty: "
        "anonymous, with the image's CAs",
        chart=True,
        default="",
        metavar="NAME",
    )
    prometheus_address: runtimes.PrometheusAddress = setting(
        "the Prometheus server the ScaledObjects of spec.autoscaling read vLLM's metrics "
        "from, e.g. http://prometheus-operated.monitoring:9090; empty: they wait for it",
        chart=True,
        default="",
        metavar="URL",
        pattern=runtimes.PROMETHEUS_URL.pattern,
    )
    picker_image: str = setting(
        "the endpoint picker of spec.routing (the Gateway API Inference Extension's EPP, "
        "built from its Go module sigs.k8s.io/gateway-api-inference-extension cmd/epp)",
        chart=True,
        default="registry.k8s.io/gateway-api-inference-extension/epp:v1.5.0",
        metavar="IMAGE",
        min_length=1,
    )
    picker_cluster_role: str = setting(
        "the ClusterRole the endpoint pickers' RoleBindings grant (the chart's "
        "<release>-endpoint-picker, which it passes: read pods and InferencePools); the "
        "default is the chart's and the OLM bundle's as release spyre-operator",
        default="spyre-operator-endpoint-picker",
        metavar="NAME",
        min_length=1,
    )
    webhook_port: Port = setting(
        "serve the admission webhook over HTTPS on this port (0: off)", metavar="PORT", default=0
    )
    webhook_secret: str | None = setting(
        "keep a self-signed CA and serving certificate in this Secret (issued when missing, "
        "renewed at 2/3 of their year)",
        metavar="NAMESPACE/NAME",
        default=None,
    )
    webhook_hosts: Names = setting(
        "a name the API server reaches the operator by, for the certificate: "
        "SERVICE.NAMESPACE.svc in a cluster, or an IP address (repeatable)",
        flag="webhook-host",
        metavar="NAME",
        default=(),
    )
    webhook_configuration: str | None = setting(
        "the ValidatingWebhookConfiguration whose caBundle the operator keeps current",
        metavar="NAME",
        default=None,
    )
    webhook_cert_dir: str | None = setting(
        "instead of --webhook-secret: serve DIR/tls.crt and DIR/tls.key, which someone else "
        "keeps (e.g. cert-manager, whose cainjector sets the caBundle)",
        metavar="DIR",
        default=None,
    )
    webhook_check_seconds: float = setting(
        "how often the certificate (and the caBundle) is checked",
        gt=0,
        default=300.0,
        metavar="SECONDS",
    )

    # glibc reads it itself at start-up; set, it wins over the operator's own limit
    # (controller/allocator.py).
    malloc_arena_max: int | None = setting(
        "glibc's arena count", env="MALLOC_ARENA_MAX", flag=False, ge=1, default=None
    )

    @field_validator("namespaces", "webhook_hosts", "runtime_image_pull_secrets", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        """The environment holds a list comma-separated."""
        if isinstance(value, str):
            return tuple(v for v in value.split(",") if v)
        return value

    @field_validator("cache_retention")
    @classmethod
    def _duration(cls, value: str) -> str:
        runtimes.duration_seconds(value)
        return value

    @field_validator(
        "kubeconfig",
        "webhook_secret",
        "webhook_configuration",
        "webhook_cert_dir",
        "malloc_arena_max",
        "runtime_injector_image",
        mode="before",
    )
    @classmethod
    def _unset(cls, value: Any) -> Any:
        return None if value == "" else value  # an empty variable is unset

    @model_validator(mode="after")
    def _runtime_images(self) -> Settings:
        self.runtime_images  # noqa: B018 (checks the repository and the Secrets' names)
        return self

    @property
    def runtime_images(self) -> RuntimeImages:
        """Where the serving images come from, and the Secrets workload pods pull with."""
        try:
            return RuntimeImages(
                self.runtime_image_repository,
                self.runtime_image_pull_secrets,
                self.runtime_injector_image,
                self.runtime_image_cards,
            )
        except ValueError as err:
            raise ValueError(
                "--runtime-image-repository/--runtime-image-pull-secret/"
                f"--runtime-injector-image: {err}"
            ) from None

    @model_validator(mode="after")
    def _webhook(self) -> Settings:
        if not self.webhook_port:
            return self
        if (self.webhook_cert_dir is None) == (self.webhook_secret is None):
            raise ValueError(
                "the webhook needs exactly one certificate source: --webhook-secret "
                "NAMESPACE/NAME (the operator keeps its own) or --webhook-cert-dir DIR (files "
                "someone else keeps, e.g. cert-manager)"
            )
        namespace, _, name = (self.webhook_secret or "").partition("/")
        if self.webhook_secret is not None and not (namespace and name):
            raise ValueError(f"--webhook-secret {self.webhook_secret}: use NAMESPACE/NAME")
        if self.webhook_secret is not None and not self.webhook_hosts:
            raise ValueError(
                "--webhook-secret needs --webhook-host (the name the API server reaches the "
                "operator by, e.g. SERVICE.NAMESPACE.svc, or 127.0.0.1)"
            )
        return self

    @model_validator(mode="after")
    def _cache_sharing(self) -> Settings:
        self.cache_sharing  # noqa: B018 (checks the repository and the Secret's name)
        return self

    @property
    def cache_sharing(self) -> CacheSharing | None:
        """The cache registry, None when off."""
        if not self.cache_registry:
            if self.cache_registry_secret:
                raise ValueError("--cache-registry-secret needs --cache-registry")
            return None
        try:
            Repository.parse(self.cache_registry)
        except RegistryError as err:
            raise ValueError(f"--cache-registry: {err}") from None
        secret = self.cache_registry_secret or None
        if secret is not None and (len(secret) > 253 or not re.match(DNS_SUBDOMAIN, secret)):
            raise ValueError(f"--cache-registry-secret {secret!r}: not a Secret's name")
        return CacheSharing(self.cache_registry, secret)

    @property
    def cache_retention_seconds(self) -> int:
        """Seconds an unused cache key stays on the volume before its clean-up; 0: forever."""
        return runtimes.duration_seconds(self.cache_retention)

    @property
    def compile_limits(self) -> tuple[int, int]:
        """Compile Jobs running at once, in all watched namespaces and in one (0: unlimited)."""
        return self.max_compiles, self.max_compiles_per_namespace

    @property
    def webhook_secret_ref(self) -> tuple[str, str] | None:
        """(namespace, name) of the Secret the operator keeps its certificates in."""
        if self.webhook_secret is None:
            return None
        namespace, _, name = self.webhook_secret.partition("/")
        return namespace, name


class SettingsError(ValueError):
    """Settings that cannot be used; the message names each flag and what to give it."""


def env_name(field: str) -> str:
    return extra_of(field).get("env") or ENV_PREFIX + field.upper()


def flag_name(field: str) -> str:
    flag = extra_of(field).get("flag")
    return "--" + (flag if isinstance(flag, str) else field.replace("_", "-"))


def chart_fields() -> dict[str, str]:
    """The chart's `operator:` values: camelCase name -> field."""
    return {to_camel(f): f for f in Settings.model_fields if extra_of(f).get("chart")}


def extra_of(field: str) -> dict[str, Any]:
    extra = Settings.model_fields[field].json_schema_extra
    return extra if isinstance(extra, dict) else {}


def from_env(environ: Mapping[str, str] | None, **given: Any) -> Settings:
    """The settings from the environment (None: this process's), `given` (the flags)
    taking precedence."""
    environ = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    for field in Settings.model_fields:
        if field in given:
            values[field] = given[field]
        elif env_name(field) in environ:
            values[field] = environ[env_name(field)]
    try:
        return Settings(**values)
    except ValidationError as err:
        raise SettingsError(_explain(err)) from None


def _explain(err: ValidationError) -> str:
    problems = []
    for error in err.errors(include_url=False):
        where = error["loc"][0] if error["loc"] else None
        message = error["msg"].removeprefix("Value error, ")
        if isinstance(where, str) and where in Settings.model_fields:
            message = f"{flag_name(where)} (${env_name(where)}): {message}"
        problems.append(message)
    return "; ".join(problems)


_current: Settings | None = None


def install(settings: Settings) -> None:
    """The settings `run` built from its flags, for the kopf handlers to find."""
    global _current
    _current = settings


def current() -> Settings:
    """The installed settings, else those of the environment (`kopf run -m ...`)."""
    return _current if _current is not None else from_env(os.environ)
