"""The README stays a short front page: the two commands CI runs, links that resolve.

The reference tables it used to hold live on generated pages under docs/reference/
(tests/deploy/test_reference_docs.py); measurements live on the topic pages under docs/results/.
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
SERVE = "bin/setup && .venv/bin/engram serve"
TESTS = "bin/setup && .venv/bin/pytest -q"
#: The results pages (docs/results/<topic>.md) the README links to.
RESULTS_TOPICS = {
    "relevance",
    "semantic-engine",
    "query-encoder",
    "capacity",
    "mcp-path",
    "memory",
    "stores-and-replicas",
    "install",
}
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """A heading's anchor as MkDocs (Python-Markdown's toc) and GitHub both make it for plain text."""
    text = unicodedata.normalize("NFKD", heading).encode("ascii", "ignore").decode()
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def anchors(page: Path) -> set[str]:
    fenced = False
    found = set()
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (m := re.match(r"#{1,6} (.+)", line)):
            found.add(slug(m.group(1)))
    return found


def test_readme_is_short():
    assert len(README.read_text(encoding="utf-8").splitlines()) <= 200


def test_readme_holds_the_two_commands_ci_runs():
    text = README.read_text(encoding="utf-8")
    assert f"\n{SERVE}\n" in text
    assert f"\n{TESTS}\n" in text
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").strip().splitlines()[-1]
    assert ci == TESTS, ".ci/run must run exactly the README's test command"


def test_readme_links_resolve():
    text = README.read_text(encoding="utf-8")
    targets = [t for t in LINK.findall(text) if not re.match(r"^[a-z]+:", t)]
    assert targets, "the README links into docs/"
    for target in targets:
        path, _, anchor = target.partition("#")
        page = ROOT / path
        assert page.exists(), f"README links to {path}, which does not exist"
        if not anchor:
            continue
        assert anchor in anchors(page), f"README links to {target}: no such heading"


def test_readme_links_every_results_topic_it_names():
    linked = {
        m.group(1)
        for t in LINK.findall(README.read_text(encoding="utf-8"))
        if (m := re.fullmatch(r"docs/results/([a-z-]+)\.md", t)) and m.group(1) != "index"
    }
    assert linked == RESULTS_TOPICS
