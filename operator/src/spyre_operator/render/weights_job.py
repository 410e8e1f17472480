"""Where a hub model's weights live on the cache volume, and the name of the Job that
downloads them (docs/contract.md, "The weights Job")."""

from __future__ import annotations

import hashlib
import json
import re

from spyre_operator.api.spec import SpyreModelSpec
from spyre_runtime import contract

COMMIT = re.compile(r"^[0-9a-f]{40}$")


def is_commit(revision: str | None) -> bool:
    return bool(revision and COMMIT.match(revision))


def weights_subpath(model_id: str, commit: str) -> str:
    """The download's directory inside the cache volume."""
    return f"{contract.WEIGHTS_DIR}/{model_id}/{commit}"


def weights_job_name(spec: SpyreModelSpec) -> str:
    """One Job per model id and revision as written (and the endpoint and token it is
    fetched with: adding a token to a gated model starts a new attempt). Two revisions of
    one commit are two Jobs but one directory: the second finds it ready."""
    model, hub = spec.model, spec.model.source.hub
    token = hub.token_secret if hub is not None else None
    identity = {
        "id": model.id,
        "revision": model.hub_revision,
        "endpoint": hub.endpoint if hub is not None else None,
        "token": None if token is None else [token.name, token.key],
    }
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()
    return f"spyre-weights-{digest[:12]}"
