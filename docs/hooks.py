"""MkDocs hook: the links of eval/RESULTS.md work inside the site.

docs/results.md includes eval/RESULTS.md whole (pymdownx.snippets), so the file's
relative links, written from eval/ (`bench-results/.../cost_growth.png`), land on a
page of docs/. This hook adds each file such a link names (images, JSON: anything but
markdown) to the site at that same relative path, and, right after the include, turns
a link that names no such file (a missing file, or a markdown file, which would be a
page outside the navigation) into its text and path. So the measurements page builds
whatever RESULTS.md links to, while every other page's links stay strictly checked.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

from markdown import Extension, Markdown
from markdown.preprocessors import Preprocessor
from mkdocs.structure.files import File, Files

RESULTS_PAGE = "results.md"
LINK = re.compile(r"(!?)\[([^\]]*)\]\(([^)\s]+)\)")
log = logging.getLogger("mkdocs.hooks.results")
_eval_dir: Path | None = None
_converting: str | None = None  # the page being converted (MkDocs builds one at a time)


def _local(target: str) -> bool:
    return not re.match(r"^([a-z][a-z0-9+.-]*:|#|/)", target)


def _kept(target: str) -> bool:
    """Whether the site holds TARGET (a path relative to eval/): a file that is not markdown."""
    if _eval_dir is None:
        return False
    path = (_eval_dir / target.split("#")[0]).resolve()
    return path.is_file() and path.suffix != ".md" and _eval_dir in path.parents


def _prose(lines: list[str]) -> list[tuple[bool, str]]:
    """Each line, and whether it lies outside a fenced code block."""
    pieces, fenced = [], False
    for line in lines:
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
            pieces.append((False, line))
        else:
            pieces.append((not fenced, line))
    return pieces


def _unlink(match: re.Match[str]) -> str:
    target = match.group(3)
    if not _local(target) or _kept(target):
        return match.group(0)
    log.info("results page: %s names no file the site holds; shown as text", target)
    return f"{match.group(2)} (`eval/{target}`)"


class _ResultsLinks(Preprocessor):
    def run(self, lines: list[str]) -> list[str]:
        if _converting != RESULTS_PAGE:
            return lines
        return [LINK.sub(_unlink, line) if prose else line for prose, line in _prose(lines)]


class _ResultsLinksExtension(Extension):
    def extendMarkdown(self, md: Markdown) -> None:  # noqa: N802 (Python-Markdown's name)
        md.preprocessors.register(_ResultsLinks(md), "engram_results_links", 31.1)  # just after snippets (32)


def on_config(config: Any) -> Any:
    global _eval_dir
    _eval_dir = Path(config["config_file_path"]).resolve().parent / "eval"
    config["markdown_extensions"].append(_ResultsLinksExtension())
    return config


def on_files(files: Files, config: Any) -> Files:
    results = _eval_dir / "RESULTS.md" if _eval_dir is not None else None
    if results is None or not results.is_file():
        return files
    lines = results.read_text(encoding="utf-8").splitlines()
    targets = {
        m.group(3).split("#")[0]
        for prose, line in _prose(lines)
        if prose
        for m in LINK.finditer(line)
        if _local(m.group(3))
    }
    for target in sorted(t for t in targets if _kept(t)):
        if files.get_file_from_path(target) is None:
            files.append(File(target, str(_eval_dir), config["site_dir"], config["use_directory_urls"]))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    global _converting
    _converting = page.file.src_uri
    return markdown
