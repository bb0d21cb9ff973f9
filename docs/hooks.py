"""MkDocs hook: the results pages' links to files under eval/ work inside the site.

The topic pages under docs/results/ link to the files a run wrote (plots, JSON, the
reports `engram bench` writes as markdown) where they lie in the repository, under
eval/ (`../../eval/bench-results/.../cost_growth.png`), so the links work when the pages
are read on a forge too. eval/ is outside the docs directory, so this hook adds each
file such a link names to the site, under the same path (`eval/...`; a markdown report
as a page outside the navigation, whose own links are followed the same way), and
rewrites the link to that place. A link that names nothing there stays as written, and
the strict build fails on it as on any other broken link: no link is quietly shown as
text.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files, InclusionLevel

LINK = re.compile(r"(!?\[[^\]]*\]\()([^)\s]+)(\))")
EVAL = "eval/"
_root: Path | None = None  # the repository: the folder holding mkdocs.yml


def _local(target: str) -> bool:
    return not re.match(r"^([a-z][a-z0-9+.-]*:|#|/)", target)


def _prose(text: str) -> list[tuple[bool, str]]:
    """Each line of TEXT, and whether it lies outside a fenced code block."""
    pieces, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
            pieces.append((False, line))
        else:
            pieces.append((not fenced, line))
    return pieces


def _repo_path(src_uri: str) -> str:
    """Where a site file lies in the repository (pages of docs/, or files added from eval/)."""
    return src_uri if src_uri.startswith(EVAL) else "docs/" + src_uri


def _eval_target(src_uri: str, target: str) -> str | None:
    """The repository path under eval/ that TARGET, linked from SRC_URI, names, if it does."""
    if not _local(target):
        return None
    path, _, _ = target.partition("#")
    found = posixpath.normpath(posixpath.join(posixpath.dirname(_repo_path(src_uri)), path))
    return found if found.startswith(EVAL) else None


def _linked(src_uri: str, text: str) -> set[str]:
    return {
        found
        for prose, line in _prose(text)
        if prose
        for m in LINK.finditer(line)
        if (found := _eval_target(src_uri, m.group(2))) is not None
    }


def on_config(config: Any) -> Any:
    global _root
    _root = Path(config["config_file_path"]).resolve().parent
    return config


def on_files(files: Files, config: Any) -> Files:
    """Add every file under eval/ that a page links to (and, from a report, what it links to)."""
    assert _root is not None
    pending = set()
    for file in files.documentation_pages():
        pending |= _linked(file.src_uri, Path(file.abs_src_path or "").read_text(encoding="utf-8"))
    while pending:
        found = pending.pop()
        source = _root / found
        if not source.is_file() or files.get_file_from_path(found) is not None:
            continue
        page = source.suffix == ".md"
        inclusion = InclusionLevel.NOT_IN_NAV if page else InclusionLevel.UNDEFINED
        files.append(File(found, str(_root), config["site_dir"], config["use_directory_urls"], inclusion=inclusion))
        if page:
            pending |= _linked(found, source.read_text(encoding="utf-8"))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    """Point a docs page's links into eval/ at the copies the site holds."""
    src_uri = page.file.src_uri
    if src_uri.startswith(EVAL):
        return markdown

    def rewrite(m: re.Match[str]) -> str:
        found = _eval_target(src_uri, m.group(2))
        if found is None or files.get_file_from_path(found) is None:
            return m.group(0)
        anchor = m.group(2).partition("#")[2]
        target = posixpath.relpath(found, posixpath.dirname(src_uri) or ".") + (f"#{anchor}" if anchor else "")
        return f"{m.group(1)}{target}{m.group(3)}"

    return "\n".join(LINK.sub(rewrite, line) if prose else line for prose, line in _prose(markdown))
