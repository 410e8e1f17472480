"""The operator's client, with GETs and LISTs of the watched kinds answered from the
watches' stores (watches.py) instead of the API server."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kubernetes import client

from spyre_operator.kube.client import KINDS, Kube
from spyre_operator.kube.watches import Store


class IndexedKube(Kube):
    """The operator's client, but GETs and LISTs of watched kinds are answered from the
    watches' stores (filled before any reconcile runs, updated before each event is
    handled), by plural. The answers are shared: read them, never change them."""

    def __init__(
        self, api: client.ApiClient, stores: Mapping[str, Store], policy: str = "policy/v1"
    ) -> None:
        super().__init__(api, policy)
        self.stores = stores

    def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        store = self.stores.get(KINDS[kind][1])
        if store is None:
            return super().get(kind, namespace, name)
        found = store.get((namespace, name))
        if found is None and not store.complete:
            # Not labelled (a user's claim): a LIST of that one name, which the role
            # allows (list and watch claims, no get).
            query = {"fieldSelector": f"metadata.name={name}"}
            items: list[dict[str, Any]] = (
                self.request("GET", self.path(kind, namespace), query=query).get("items") or []
            )
            return items[0] if items else None
        return found

    def list(
        self, kind: str, namespace: str, selector: str, consistent: bool = False
    ) -> list[dict[str, Any]]:
        """`selector`: k=v pairs, comma-separated (what the reconciler asks for). A store
        is filled by its own watch, so it may lag behind another kind's (a Job's end seen
        before its pod's): `consistent` asks the API server."""
        store = self.stores.get(KINDS[kind][1])
        if consistent or store is None or not store.complete:
            return super().list(kind, namespace, selector)
        return store.select(namespace, equalities(selector))


def equalities(selector: str) -> dict[str, str]:
    """A label selector of k=v pairs as a dict; ValueError for any other kind of selector
    (the reconciler asks for none)."""
    out = {}
    for term in selector.split(","):
        name, sep, value = term.partition("=")
        if not sep or not name or value.startswith("=") or name.endswith("!"):
            raise ValueError(f"only k=v label selectors are answered from a store: {selector!r}")
        out[name.strip()] = value.strip()
    return out
