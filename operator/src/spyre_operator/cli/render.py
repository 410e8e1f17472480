"""Subcommands `crd`, `render` and `validate`.

Problems go to stderr as `FILE: NAME: spec.path: message`, the same messages the operator
and its admission webhook report; invalid input exits 2, without a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from spyre_operator import settings
from spyre_operator.api.crd import CACHE_CRD_FILES, CRD_FILES, build_cache_crd, build_crd
from spyre_operator.api.imageref import repository_problem
from spyre_operator.api.runtimes import (
    DEFAULT_IMAGES,
    IMAGE_REPOSITORY,
    PLATFORMS,
    RuntimeImages,
    prometheus_address,
)
from spyre_operator.api.validation import DNS_1035, SpyreModel, is_dns_label, review
from spyre_operator.render.autoscaler import scaled_object
from spyre_operator.render.children import desired
from spyre_operator.render.router import http_route, inference_pool, picker_objects
from spyre_operator.render.weights_job import is_commit
from spyre_operator.render.yamlio import MAX_CHARS, dump_documents, load_documents

INVALID = 2
CRD_HEADER = (
    "# Generated from the pydantic models in spyre_operator.api by "
    "`spyre-operator crd --write`; do not edit.\n"
)


def register(sub: Any) -> None:
    """Add this module's subcommands to the `spyre-operator` parser."""
    crd = sub.add_parser(
        "crd", help="print the SpyreModel and SpyreCache CRDs, or --write the committed copies"
    )
    crd.add_argument(
        "--write",
        action="store_true",
        help="regenerate " + ", ".join((*CRD_FILES, *CACHE_CRD_FILES, CHART_SCHEMA)),
    )
    crd.add_argument("--root", type=Path, default=Path(), help="repository root (default: .)")
    crd.set_defaults(func=_crd)

    render = sub.add_parser("render", help="print the objects the operator writes for FILEs")
    render.add_argument("files", nargs="+", metavar="FILE", help="SpyreModel YAML ('-': stdin)")
    render.add_argument(
        "--uid",
        help="the SpyreModel's uid: adds the ownerReferences, so the output is exactly what "
        "the operator writes (default: none)",
    )
    render.add_argument("--namespace", default="default", help="when metadata has none")
    render.add_argument(
        "--platform",
        choices=PLATFORMS,
        default=PLATFORMS[0],
        help="as the operator's --platform: openshift leaves fsGroup to the SCC "
        "(default: %(default)s)",
    )
    render.add_argument(
        "--runtime-image-repository",
        type=_repository,
        default=IMAGE_REPOSITORY,
        metavar="REPOSITORY",
        help="as the operator's: the serving image's repository (default: %(default)s)",
    )
    render.add_argument(
        "--runtime-image-pull-secret",
        action="append",
        default=[],
        metavar="NAME",
        help="as the operator's: a Secret every pod pulls with (repeatable)",
    )
    render.add_argument(
        "--runtime-injector-image",
        metavar="IMAGE",
        help="the operator's image, whose init container brings spyre-runtime to an image of "
        "an upstream runtime.imageProfile (default: <the serving repository's parent>/"
        "operator:<version>, where a release puts it)",
    )
    _cards_flag(render)
    render.add_argument(
        "--prometheus-address",
        type=_prometheus,
        metavar="URL",
        help="as the operator's: with it, a SpyreModel with spec.autoscaling gets its KEDA "
        "ScaledObject (at spec.autoscaling.maxReplicas: the operator lowers it to what the "
        "nodes' cards hold)",
    )
    render.add_argument(
        "--commit",
        type=_commit,
        help="the commit a hub model's revision resolves to (the weights Job says it in "
        "status.weights.commit): adds the compile Job and the Deployment, which depend on it; "
        "not needed when the revision is a full commit",
    )
    render.set_defaults(func=_render)

    validate = sub.add_parser("validate", help="check SpyreModel FILEs, print every problem")
    validate.add_argument("files", nargs="+", metavar="FILE", help="SpyreModel YAML ('-': stdin)")
    validate.add_argument(
        "--model-config",
        metavar="JSON",
        help="the model's config.json: find its known-config entry by architecture, as the "
        "plugins do (default: by model.id)",
    )
    _cards_flag(validate)
    validate.set_defaults(func=_validate, namespace="default")


def _cards_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--runtime-image-cards",
        choices=("true", "false"),
        default="true",
        help="as the operator's (a release's chart says false): false refuses a model on "
        "cards without spec.image (default: %(default)s)",
    )


def crd_yaml(which: str = "all") -> str:
    """The CRDs as YAML: `all`, or one by kind (`SpyreModel`, `SpyreCache`)."""
    crds = {"SpyreModel": build_crd, "SpyreCache": build_cache_crd}
    chosen = [build() for kind, build in crds.items() if which in ("all", kind)]
    return dump_documents(chosen, header=CRD_HEADER)


CHART_SCHEMA = "charts/spyre-operator/values.schema.json"


def chart_values_schema(text: str) -> str:
    """The chart's values schema with its `operator:` section derived from the operator's
    settings (its logLevel, the `--verbose` switch, is the chart's own)."""
    schema = json.loads(text)
    section = schema["properties"]["operator"]["properties"]
    section_kept = {"logLevel": section["logLevel"]}
    schema["properties"]["operator"]["properties"] = section_kept | _settings_schema()
    return json.dumps(schema, indent=2) + "\n"


def _settings_schema() -> dict[str, Any]:
    """The JSON schema of the chart's `operator:` values (settings.chart_fields)."""
    model = settings.Settings
    properties = model.model_json_schema()["properties"]
    out = {}
    for camel, name in settings.chart_fields().items():
        found = properties[name]
        description = model.model_fields[name].description
        entry = {
            "description": f"{description} ({settings.flag_name(name)})",
            "type": found.get("type", "string"),
        }
        for key in ("minimum", "exclusiveMinimum", "maximum", "enum", "pattern"):
            if key in found:
                entry[key] = found[key]
        out[camel] = entry
    return out


def write_crds(root: Path) -> list[Path]:
    """The CRDs, and the chart's values schema of the operator's settings."""
    chart = root / CHART_SCHEMA
    chart.write_text(chart_values_schema(chart.read_text()))
    written = [chart]
    for kind, names in (("SpyreModel", CRD_FILES), ("SpyreCache", CACHE_CRD_FILES)):
        text = crd_yaml(kind)
        for name in names:
            path = root / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            written.append(path)
    return written


@dataclass
class Loaded:
    models: list[tuple[str, SpyreModel]] = field(default_factory=list)  # (label, model)
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def _read(file: str) -> str:
    """The text, or its first MAX_CHARS + 1 characters: enough for load_documents to say
    it is too long, without reading a huge file into memory."""
    if file == "-":
        return sys.stdin.read(MAX_CHARS + 1)
    with Path(file).open(encoding="utf-8") as stream:
        return stream.read(MAX_CHARS + 1)


def load(
    files: list[str],
    namespace: str,
    model_config: dict[str, Any] | None = None,
    images: RuntimeImages = DEFAULT_IMAGES,
) -> Loaded:
    """The models of `files`, each judged as the operator with `images` would."""
    out = Loaded()
    for file in files:
        try:
            docs = load_documents(_read(file), file)
        except (OSError, UnicodeDecodeError) as err:
            out.errors.append(f"{file}: cannot read: {err}")
            continue
        except yaml.YAMLError as err:
            out.errors.append(f"{file}: invalid YAML: {' '.join(str(err).split())}")
            continue
        if not docs:
            out.errors.append(f"{file}: no YAML documents")
        for index, doc in enumerate(docs, 1):
            meta = doc.get("metadata") if isinstance(doc, dict) else None
            name = meta.get("name") if isinstance(meta, dict) else None
            label = f"{file}: {name if is_dns_label(name, DNS_1035) else f'document {index}'}"
            # what the webhook says too, and what the API server says of the rest of a file
            verdict = review(doc, namespace, model_config, from_file=True, images=images)
            out.errors += [f"{label}: {problem}" for problem in verdict.problems]
            if verdict.model is not None:
                out.models.append((label, verdict.model))
            if verdict.warning:
                out.warnings.append(f"{label}: warning: {verdict.warning}")
    return out


def _report(loaded: Loaded) -> int:
    for line in loaded.errors + loaded.warnings:
        print(line, file=sys.stderr)
    return INVALID if loaded.errors else 0


def _crd(args: argparse.Namespace) -> int:
    if args.write:
        for path in write_crds(args.root):
            print(f"wrote {path}")
    else:
        sys.stdout.write(crd_yaml())
    return 0


def _commit(text: str) -> str:
    if not is_commit(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a full commit (40 hex digits)")
    return text


def _repository(text: str) -> str:
    problem = repository_problem(text)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return text


def _prometheus(text: str) -> str:
    try:
        return prometheus_address(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _render(args: argparse.Namespace) -> int:
    try:
        images = RuntimeImages(
            args.runtime_image_repository,
            tuple(args.runtime_image_pull_secret),
            args.runtime_injector_image,
            args.runtime_image_cards == "true",
        )
    except ValueError as err:
        print(f"spyre-operator render: {err}", file=sys.stderr)
        return 2
    loaded = load(args.files, args.namespace, images=images)
    status = _report(loaded)
    if status == 0:
        docs = []
        for label, model in loaded.models:
            want = desired(model, args.uid, args.platform, args.commit, images)
            if want.job is None:
                print(
                    f"{label}: the compile Job (and the Deployment) depend on the commit that "
                    f"revision {model.spec.model.hub_revision} resolves to; pass --commit to "
                    "render them",
                    file=sys.stderr,
                )
            docs += want.objects()
            scaling = model.spec.autoscaling
            if scaling and args.prometheus_address and want.deployment is not None:
                address, most = args.prometheus_address, scaling.max_replicas
                docs.append(scaled_object(model, args.uid, address, most))
            docs += _routing(model, args.uid)
        sys.stdout.write(dump_documents(docs))
    return status


def _routing(model: SpyreModel, uid: str | None) -> list[dict[str, Any]]:
    """spec.routing's objects: the pool, the picker's (with the default picker image and
    ClusterRole, and no owner: the pool's uid exists once it is made) and the route."""
    if model.spec.routing is None:
        return []
    defaults = settings.Settings()
    picker = picker_objects(model, None, defaults.picker_image, defaults.picker_cluster_role)
    route = http_route(model, uid)
    return [inference_pool(model, uid), *picker, *([route] if route else [])]


def _model_config(path: str) -> dict[str, Any]:
    """A config.json as a mapping; ValueError with the reason otherwise."""
    try:
        config = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{path}: cannot read the model config: {err}") from err
    if not isinstance(config, dict) or "model_type" not in config:
        raise ValueError(f"{path}: not a model config.json (a JSON object with model_type)")
    return config


def _validate(args: argparse.Namespace) -> int:
    try:
        model_config = _model_config(args.model_config) if args.model_config else None
    except ValueError as err:
        print(err, file=sys.stderr)
        return INVALID
    images = RuntimeImages(cards=args.runtime_image_cards == "true")
    loaded = load(args.files, args.namespace, model_config, images)
    for label, _ in loaded.models:
        print(f"{label}: valid")
    return _report(loaded)
