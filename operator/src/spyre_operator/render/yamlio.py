"""YAML in and out for the CLI: multi-document, deterministic, no anchors.

Input is loaded with bounds, as hostile files (GitOps repositories, templating tools) must
not crash, hang or flood `validate`: size, nesting depth, alias expansion, number length;
a duplicate key is an error (the API server refuses them too), not "the last one wins".
"""

from __future__ import annotations

import io
from collections.abc import Iterable
from typing import Any

import yaml
from yaml.composer import ComposerError
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from spyre_operator.api.problem import shown

try:  # libyaml: a 1 MB file loads well within a second
    from yaml import CSafeLoader as SafeLoader
except ImportError:  # PyPI has no ppc64le wheel: that image's PyYAML is pure Python (slower)
    from yaml import SafeLoader  # type: ignore[assignment]

# The API server's request limit: no bigger SpyreModel can be applied.
MAX_CHARS = 3 * 1024 * 1024
# A SpyreModel nests about 12 levels (affinity); Python's stack ends near 500.
MAX_DEPTH = 100
# Aliases may add as many nodes as the document has, plus this (an alias bomb adds billions).
MAX_ALIAS_NODES = 10_000
# An int64 has 19 digits; Python refuses to convert more than 4,300.
MAX_NUMBER_CHARS = 100
MERGE_TAG = "tag:yaml.org,2002:merge"


class _Named(io.StringIO):
    """Text with a name: YAML's error marks then say the file, not "<unicode string>"."""

    def __init__(self, text: str, name: str) -> None:
        super().__init__(text)
        self.name = name


class _Loader(SafeLoader):
    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        first: dict[tuple[str, str], int] = {}
        for key_node, _ in node.value:
            if isinstance(key_node, ScalarNode) and key_node.tag != MERGE_TAG:
                key = (key_node.tag, key_node.value)  # as written: cheaper than building it
                if key in first:
                    raise ConstructorError(
                        "while constructing a mapping",
                        node.start_mark,
                        f"found the key {shown(key_node.value)} twice (first on line "
                        f"{first[key]}): keep one",
                        key_node.start_mark,
                    )
                first[key] = key_node.start_mark.line + 1
        mapping: dict[Any, Any] = super().construct_mapping(node, deep)
        return mapping

    def construct_bounded_int(self, node: ScalarNode) -> int:
        if len(node.value) > MAX_NUMBER_CHARS:
            raise ConstructorError(
                None,
                None,
                f"a number of {len(node.value)} characters: Kubernetes numbers have at most "
                "19 digits",
                node.start_mark,
            )
        number: int = super().construct_yaml_int(node)
        return number

    def construct_object(self, node: Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep)
        except ValueError as err:  # a scalar that is not what it looks or is tagged as:
            # `2001-13-45` (a date's form), `!!int many`; said with its line
            raise ConstructorError(None, None, str(err), node.start_mark) from err


_Loader.add_constructor("tag:yaml.org,2002:int", _Loader.construct_bounded_int)


class _Dumper(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:
        return True  # repeated dicts are written out, never as &id001 anchors


def dump_documents(docs: Iterable[Any], header: str = "") -> str:
    body = yaml.dump_all(docs, Dumper=_Dumper, sort_keys=False, explicit_start=True, width=100)
    return header + body


def load_documents(text: str, name: str = "<input>") -> list[Any]:
    """Every non-empty document; raises yaml.YAMLError on bad YAML or a bound exceeded (the
    message names `name` and the line)."""
    if len(text) > MAX_CHARS:
        raise yaml.YAMLError(
            f"{len(text)} characters: more than the {MAX_CHARS} a Kubernetes request holds"
        )
    aliased = _check_depth(text, name)
    loader = _Loader(_Named(text, name))
    try:
        docs = []
        while loader.check_node():
            node = loader.get_node()
            assert node is not None  # check_node said there is one
            if aliased:
                _check_aliases(node)
            doc = loader.construct_document(node)
            if doc is not None:
                docs.append(doc)
        return docs
    finally:
        loader.dispose()


def _check_depth(text: str, name: str) -> bool:
    """Nesting checked on the event stream (flat), before anything recursive reads it;
    whether the text has aliases."""
    parser = SafeLoader(_Named(text, name))
    depth, aliased = 0, False
    try:
        while parser.check_event():
            event = parser.get_event()
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > MAX_DEPTH:
                    raise ComposerError(
                        None,
                        None,
                        f"nested more than {MAX_DEPTH} levels deep: a SpyreModel needs far fewer",
                        event.start_mark,  # type: ignore[arg-type]  # libyaml's Mark
                    )
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
            elif isinstance(event, yaml.AliasEvent):
                aliased = True
        return aliased
    finally:
        parser.dispose()


def _children(node: Node) -> list[Node]:
    if isinstance(node, SequenceNode):
        return list(node.value)
    if isinstance(node, MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def _check_aliases(root: Node) -> None:
    """The document's size with every alias written out, counted once per distinct node
    (no expansion): an alias bomb is refused before anything walks it."""
    size: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            on_path.discard(key)
            size[key] = 1 + sum(size[id(child)] for child in _children(node))
        elif key in on_path:
            raise ComposerError(
                None, None, "an alias refers to a node that contains it", node.start_mark
            )
        elif key not in size:
            on_path.add(key)
            stack.append((node, True))
            stack += [(child, False) for child in _children(node)]
    added = size[id(root)] - len(size)
    if added > MAX_ALIAS_NODES + len(size):
        raise ComposerError(
            None,
            None,
            f"aliases expand this document by {added} nodes (it has {len(size)}): write the "
            "repeated parts out, or use fewer aliases",
            root.start_mark,
        )
