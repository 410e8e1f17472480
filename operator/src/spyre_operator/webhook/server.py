"""The HTTPS endpoint of the webhook, as kopf's `settings.admission.server`.

kopf does the AdmissionReview protocol (the request, the `@kopf.on.validate` handler in
handlers.py, the response with its warnings); this server only carries it over HTTPS.
It replaces `kopf.WebhookServer` for one reason: a renewed certificate is loaded into the
live SSL context, where kopf's server stops listening and starts again (a window in which
the API server's calls are refused, which `failurePolicy: Fail` turns into refused
writes). It checks its certificate source every `check_seconds`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Literal

import aiohttp.web
import kopf

from spyre_operator.api.runtimes import RuntimeImages
from spyre_operator.kube.client import Kube, load_api_client
from spyre_operator.settings import Settings
from spyre_operator.webhook.keeper import CertDirectory, CertSource, SecretKeeper
from spyre_operator.webhook.review import answer

log = logging.getLogger(__name__)

HANDLER_ID = "spyremodels"  # the handler (both kinds) in handlers.py, and the URL path
PATH = f"/{HANDLER_ID}"
OPERATIONS: tuple[Literal["CREATE"], Literal["UPDATE"]] = ("CREATE", "UPDATE")


def admit(
    operation: str,
    body: kopf.Body,
    old: kopf.Body | None,
    warnings: list[str],
    images: RuntimeImages,
) -> None:
    """The `@kopf.on.validate` handler's work: kopf turns the error into the refusal."""
    verdict = answer(operation, body, old, images)
    warnings.extend(verdict.warnings)
    if verdict.refusal is not None:
        raise kopf.AdmissionError(verdict.refusal, code=422)


def load_into(context: ssl.SSLContext, cert: bytes, key: bytes) -> None:
    """The ssl module loads a certificate only from files: a private directory, at once
    removed again."""
    with tempfile.TemporaryDirectory(prefix="spyre-webhook-") as tmp:
        cert_file, key_file = Path(tmp, "tls.crt"), Path(tmp, "tls.key")
        cert_file.write_bytes(cert)
        key_file.touch(mode=0o600)
        key_file.write_bytes(key)
        context.load_cert_chain(cert_file, key_file)


class AdmissionServer:
    def __init__(self, port: int, source: CertSource, check_seconds: float) -> None:
        self.port, self.source, self.check_seconds = port, source, check_seconds

    async def __call__(self, fn: kopf.WebhookFn) -> AsyncIterator[kopf.WebhookClientConfig]:
        cert, key = await asyncio.to_thread(self.source.current)
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        load_into(context, cert, key)

        async def review(request: aiohttp.web.Request) -> aiohttp.web.Response:
            try:
                data = json.loads(await request.text())
            except json.JSONDecodeError as err:
                raise aiohttp.web.HTTPBadRequest(reason=f"not JSON: {err}") from err
            response = await fn(data, webhook=HANDLER_ID, headers=dict(request.headers))
            return aiohttp.web.json_response(response)

        app = aiohttp.web.Application()
        app.add_routes([aiohttp.web.post(PATH, review)])
        runner = aiohttp.web.AppRunner(app, handle_signals=False, access_log=None)
        await runner.setup()
        try:
            await aiohttp.web.TCPSite(runner, "0.0.0.0", self.port, ssl_context=context).start()
            log.info("webhook: serving admission reviews on https://0.0.0.0:%d%s", self.port, PATH)
            # kopf manages no webhook configuration here (settings.admission.managed is
            # unset: the chart or the tests make it); this is only what kopf expects.
            yield kopf.WebhookClientConfig(url=f"https://127.0.0.1:{self.port}{PATH}")
            while True:
                await asyncio.sleep(self.check_seconds)
                try:
                    renewed = await asyncio.to_thread(self.source.current)
                    if renewed != (cert, key):
                        # into a spare context first: a pair that does not load (files read
                        # halfway through their replacement) must not break the live one
                        load_into(ssl.create_default_context(ssl.Purpose.CLIENT_AUTH), *renewed)
                        load_into(context, *renewed)  # new connections get it (loop thread)
                        cert, key = renewed
                        log.info("webhook: serving the renewed certificate")
                except Exception as err:  # the API, the files: the next check tries again
                    log.warning("webhook: kept the certificate served: %s", err)
        finally:
            await runner.cleanup()


def configure(settings: kopf.OperatorSettings, config: Settings) -> None:
    """Serve the webhook (from the startup handler): the certificate from the files, or
    kept by the operator in its Secret with a client of its own (two connections)."""
    source: CertSource
    secret = config.webhook_secret_ref
    if secret is None:
        assert config.webhook_cert_dir is not None
        source = CertDirectory(Path(config.webhook_cert_dir))
    else:
        api = load_api_client(config.kubeconfig, pool_size=2)
        source = SecretKeeper(Kube(api), secret, config.webhook_configuration, config.webhook_hosts)
    settings.admission.server = AdmissionServer(
        config.webhook_port, source, config.webhook_check_seconds
    )
