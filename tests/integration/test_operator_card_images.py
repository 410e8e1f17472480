"""An operator without serving images for cards (`--runtime-image-cards=false`, a release's
chart): a SpyreModel on cards without spec.image is refused at apply time by the webhook
and, admitted while the webhook was away, reported Invalid in its status with the same
text; it gets no Job and no pod that would pull a tag nobody built. CPU models and models
that name their image are admitted."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cluster_sim import condition, create, example, model, wait_phase
from test_webhook_on_server import DENIED, Webhooked, webhooked

from spyre_operator.api.runtimes import RuntimeImages
from spyre_operator.api.validation import validate
from spyre_operator.kube.client import ApiError

pytestmark = pytest.mark.integration

CARDS = example("granite-3.3-8b-instruct")  # backend sendnn, no spec.image
SAYS = "spec.image: is required for backend sendnn (Spyre cards)"


@pytest.fixture
def hooked(kubeconfig: Path, tmp_path: Path) -> Iterator[Webhooked]:
    """Started by the test, once a model got in while the webhook was away."""
    flag = "--runtime-image-cards=false"
    with webhooked(kubeconfig, tmp_path / "operator.log", flag, start=False) as running:
        yield running


def refused(hooked: Webhooked, doc: dict[str, Any]) -> str:
    with pytest.raises(ApiError) as err:
        hooked.dry_run(doc)
    message: str = err.value.body.get("message", "")
    assert DENIED in message, message
    return message.split(DENIED, 1)[1]


def test_a_card_model_without_an_image_is_refused_and_never_gets_a_pod(
    hooked: Webhooked,
) -> None:
    kube, ns = hooked.kube, hooked.namespace
    hooked.set_policy("Ignore")  # admitted while the operator is away
    create(kube, model(ns, "cards", CARDS))
    hooked.start()

    st = wait_phase(kube, ns, "cards", "Invalid")
    (expected,) = validate(CARDS, RuntimeImages(cards=False))
    assert condition(st, "Degraded") == ("True", "InvalidSpec", str(expected))
    assert str(expected).startswith(SAYS)
    assert "spec.runtime.imageProfile: sendnn-inference" in str(expected)
    assert kube.list("Job", ns, "") == [] and kube.list("Deployment", ns, "") == []

    assert refused(hooked, model(ns, "again", CARDS)) == str(expected)
    hooked.dry_run(model(ns, "on-cpu", example("micro-granite-cpu")))
    named = example("granite-3.3-8b-ibm-image")
    hooked.dry_run(model(ns, "named", named))
