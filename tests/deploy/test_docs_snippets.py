"""Every shell and Python snippet in README.md and docs/ runs as a person pasting it would.

A page's ```bash, ```sh and ```python blocks run in order, as one reader walking the page,
in a fresh working directory (the repository's `examples/` beside it, no data directory
yet) with a fresh HOME, no `ENGRAM_*` variable set and the installed `engram` first on
PATH. A block passes when it exits 0 (a shell block runs under `set -eo pipefail`, so a
failing command, a `curl` that fires before the server listens or an import that no
longer resolves fails it) and prints no traceback. What a block starts in the background
(`engram serve ... &`) is stopped when the page is done. The documented port, 8765, is
replaced by a free one, so pages may run side by side.

A block that cannot run here (it serves until stopped, needs a PostgreSQL server, a
desktop client or hours of CPU) says why on the line before its fence:
`<!-- docs-test: skip: REASON -->`. Output shown to the reader goes in ```text blocks.

Every page's commands share one user cache whose model files are made once per test
run for all the xdist workers before the first page runs (as a reader's machine makes
them once): pages then pay a model load each, not an export each.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
RUN = {"bash": "bash", "sh": "bash", "shell": "bash", "python": "python"}
SKIP = re.compile(r"^\s*<!--\s*docs-test:\s*skip:\s*(\S.*?)\s*-->\s*$")
FENCE = re.compile(r"^(\s*)(```+|~~~+)\s*([\w+-]*)")
DOCUMENTED_PORT = "8765"
BLOCK_TIMEOUT_S = 600
#: What a page's blocks need that an earlier page made: the operations page is read by an
#: operator whose data directory already holds memory.
PRELUDE = {
    "docs/operations.md": "engram ingest examples/ops-notes --tenant acme --workspace notes --data-dir ./data",
}


@dataclass(frozen=True)
class Snippet:
    page: str
    line: int
    lang: str
    code: str
    skip: str | None


def snippets(page: Path, root: Path = ROOT) -> list[Snippet]:
    """The fenced blocks of ``page`` (named relative to ``root``) in a language this runner knows, in order."""
    found: list[Snippet] = []
    lines = page.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if opening is None:
            i += 1
            continue
        indent, fence, lang = opening.groups()
        body, j = [], i + 1
        while j < len(lines) and not lines[j].strip().startswith(fence):
            body.append(lines[j][len(indent) :] if lines[j].startswith(indent) else lines[j])
            j += 1
        if lang in RUN:
            before = next((lines[k] for k in range(i - 1, -1, -1) if lines[k].strip()), "")
            skip = SKIP.match(before)
            rel = str(page.relative_to(root))
            found.append(Snippet(rel, i + 1, RUN[lang], "\n".join(body) + "\n", skip.group(1) if skip else None))
        i = j + 1
    return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _environment(home: Path, cache: Path, port: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENGRAM_")}
    env.update(
        HOME=str(home),
        XDG_CONFIG_HOME=str(home / ".config"),
        XDG_DATA_HOME=str(home / ".local" / "share"),
        XDG_STATE_HOME=str(home / ".local" / "state"),
        XDG_CACHE_HOME=str(cache),
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        HF_HUB_OFFLINE="1",
        ENGRAM_PORT=str(port),
        PYTHONUNBUFFERED="1",
    )
    return env


def _stop(groups: list[int]) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for group in groups:
            try:
                os.killpg(group, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and any(_group_alive(g) for g in groups):
            time.sleep(0.2)


def _group_alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    return True


def _run_page(page: str, blocks: list[Snippet], work: Path, env: dict[str, str], port: int) -> None:
    groups: list[int] = []
    try:
        steps = [Snippet(page, 0, "bash", PRELUDE[page], None)] if page in PRELUDE else []
        for n, block in enumerate(steps + blocks):
            code = block.code.replace(DOCUMENTED_PORT, str(port))
            script = work.parent / f"block-{n}.{'py' if block.lang == 'python' else 'sh'}"
            script.write_text(code if block.lang == "python" else "set -eo pipefail\n" + code, encoding="utf-8")
            command = [sys.executable, str(script)] if block.lang == "python" else ["bash", str(script)]
            out, err = work.parent / f"block-{n}.out", work.parent / f"block-{n}.err"
            # Files, not pipes: a server the block leaves in the background keeps its
            # standard streams open after the block's shell has exited.
            with out.open("wb") as stdout, err.open("wb") as stderr:
                proc = subprocess.Popen(
                    command, cwd=work, env=env, stdout=stdout, stderr=stderr, start_new_session=True
                )
                groups.append(proc.pid)
                try:
                    status = proc.wait(timeout=BLOCK_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    status = None
            shown = f"{page}:{block.line}\n{block.code}\n--- stdout\n{out.read_text()[-3000:]}"
            shown += f"\n--- stderr\n{err.read_text()[-3000:]}"
            assert status == 0, f"exit {status}: {shown}"
            assert "Traceback (most recent call last)" not in err.read_text(), shown
    finally:
        _stop(groups)


def _pages_with_runnable_blocks() -> list[str]:
    return [str(p.relative_to(ROOT)) for p in PAGES if any(s.skip is None for s in snippets(p))]


def test_every_snippet_runs_or_says_why_not() -> None:
    """Each block in a runnable language is run by this suite or names its reason."""
    every = [s for page in PAGES for s in snippets(page)]
    assert every, "README.md and docs/ hold shell and Python snippets"
    for snippet in every:
        assert snippet.skip is None or len(snippet.skip) > 10, f"{snippet.page}:{snippet.line}: say why it cannot run"
    assert sum(s.skip is None for s in every) >= 5, "most walk-throughs run"


def test_the_parser_finds_indented_blocks_and_their_markers(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "text\n\n```bash\necho one\n```\n\n- item\n\n  <!-- docs-test: skip: needs a remote host here -->\n"
        "  ```python\n  print(2)\n  ```\n\n```text\nnot run\n```\n",
        encoding="utf-8",
    )
    found = snippets(page, root=tmp_path)
    assert [(s.lang, s.code, s.skip) for s in found] == [
        ("bash", "echo one\n", None),
        ("python", "print(2)\n", "needs a remote host here"),
    ]


@pytest.fixture(scope="session")
def user_cache(tmp_path_factory: pytest.TempPathFactory, model_files: Path) -> Path:
    """The XDG cache directory of every page: engram's models in it are the run's shared
    model files (tests/conftest.py)."""
    cache = tmp_path_factory.getbasetemp() / "docs-snippets-cache"
    (cache / "engram").mkdir(parents=True, exist_ok=True)
    (cache / "engram" / "models").symlink_to(model_files, target_is_directory=True)
    return cache


@pytest.mark.parametrize("page", _pages_with_runnable_blocks())
def test_page_snippets_run(page: str, tmp_path: Path, user_cache: Path) -> None:
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    home.mkdir()
    (work / "examples").symlink_to(ROOT / "examples")
    port = _free_port()
    blocks = [s for s in snippets(ROOT / page) if s.skip is None]
    _run_page(page, blocks, work, _environment(home, user_cache, port), port)
