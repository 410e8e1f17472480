"""Every relative link and `#anchor` in README.md and docs/*.md leads somewhere: the file
exists, and the anchor is a heading of the file it points into, spelled as GitHub spells
heading anchors. The chart's alerts' runbook links lead to headings of docs/operations.md."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
CHART = ROOT / "charts" / "spyre-operator"

FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
# [text](target) and ![alt](target); the target ends at the first space or ")".
LINK = re.compile(r"!?\[(?:[^\]`]|`[^`]*`)*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
CODE_SPAN = re.compile(r"`[^`]*`")


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: the rendered text (link text, code without its
    backticks, no emphasis marks), lower-cased, every character but letters, digits,
    `-`, `_` and spaces dropped, spaces turned into `-`."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = text.replace("`", "").replace("*", "")
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


def _prose(path: Path) -> list[str]:
    """The file's lines outside fenced code blocks."""
    lines, fenced = [], False
    for line in path.read_text().splitlines():
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines


def anchors(path: Path) -> set[str]:
    """The heading anchors of a Markdown file; a repeated one gets -1, -2, ... as on
    GitHub."""
    seen: Counter[str] = Counter()
    out = set()
    for line in _prose(path):
        match = HEADING.match(line)
        if match:
            base = slug(match.group(2))
            out.add(f"{base}-{seen[base]}" if seen[base] else base)
            seen[base] += 1
    return out


def links(path: Path) -> list[str]:
    """The link targets of a Markdown file's prose (not in code blocks or code spans; a
    link's text may go on over a line break, as in a paragraph)."""
    paragraphs = "\n".join(_prose(path)).split("\n\n")
    found = []
    for paragraph in paragraphs:
        found += LINK.findall(CODE_SPAN.sub("", paragraph.replace("\n", " ")))
    return found


def broken(path: Path) -> list[str]:
    problems = []
    for target in links(path):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:, ...
            continue
        file_part, _, anchor = target.partition("#")
        into = (path.parent / file_part).resolve() if file_part else path
        if not into.exists():
            problems.append(f"{target}: no such file")
        elif anchor and into.suffix == ".md" and anchor not in anchors(into):
            problems.append(f"{target}: no heading #{anchor} in {into.name}")
    return problems


def test_the_slugs_follow_githubs_rules() -> None:
    assert slug("Admission: invalid SpyreModels are refused at `kubectl apply`") == (
        "admission-invalid-spyremodels-are-refused-at-kubectl-apply"
    )
    assert slug("Child objects (`render/children.py`)") == "child-objects-renderchildrenpy"
    assert slug("At scale: `--scale 10000 --burst 1000` (2026-11-26)") == (
        "at-scale---scale-10000---burst-1000-2026-11-26"
    )
    assert slug("The [SpyreModel](api.md) **API**") == "the-spyremodel-api"


def test_a_missing_file_or_heading_is_found(tmp_path: Path) -> None:
    doc = tmp_path / "a.md"
    (tmp_path / "b.md").write_text("# Title\n## Same\n## Same\n```\n# not a heading\n```\n")
    doc.write_text(
        "[ok](b.md#same-1) [ok](#here) [bad](b.md#same-2) [bad](c.md) `[code](x.md)` [a\n"
        "link over a line break](d.md)\n\n"
        "# Here\n[bad](b.md#not-a-heading)\n"
    )
    assert broken(doc) == [
        "b.md#same-2: no heading #same-2 in b.md",
        "c.md: no such file",
        "d.md: no such file",
        "b.md#not-a-heading: no heading #not-a-heading in b.md",
    ]


@pytest.mark.parametrize("path", DOCS, ids=[str(p.relative_to(ROOT)) for p in DOCS])
def test_every_relative_link_and_anchor_resolves(path: Path) -> None:
    assert broken(path) == []


def test_every_runbook_link_of_the_alerts_leads_to_a_heading() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    url = values["monitoring"]["rules"]["runbookUrl"]
    page = ROOT / url.split("/blob/main/", 1)[1]
    template = (CHART / "templates" / "prometheus-rules.yaml").read_text()
    alerts = re.findall(r"- alert: (\w+)", template)
    runbooks = re.findall(r"runbook_url: \{\{ \$runbook \}\}#([\w-]+)", template)
    assert len(runbooks) == len(alerts) > 0
    assert runbooks == [alert.lower() for alert in alerts]
    assert set(runbooks) <= anchors(page), set(runbooks) - anchors(page)
