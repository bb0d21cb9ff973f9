"""Secrets over MCP: every form of tests/fixtures/secrets/positives.txt, captured through
a real client, is refused with SECRET_DETECTED, and none of it reaches the disk
(database, WAL, index files, audit log: a byte scan of the whole data directory)."""

from __future__ import annotations

import copy
import re

import pytest
from rel_support import (
    FIGURES,
    MODES,
    TESTS,
    capture_args,
    check_envelope,
    code,
    connect,
    ctx_token,
    scan_dir,
)

from engram.models.tools import CAPTURE

pytestmark = pytest.mark.anyio
CORPUS = TESTS / "fixtures" / "secrets" / "positives.txt"


def corpus() -> list[tuple[str, str]]:
    out = []
    for line in CORPUS.read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        case, _, text = line.partition(" | ")
        out.append((case.strip(), text.replace("\\n", "\n")))
    return out


def needles(text: str) -> list[str]:
    """The distinctive parts to look for on disk: every run of 12+ token characters."""
    return sorted({m for m in re.findall(r"[A-Za-z0-9_\-+/=.~:]{12,}", text)}, key=len)[-3:] or [text]


PLACES = ("component", "context", "locator", "attestation", "source_ref")


def with_secret(text: str, place: str) -> dict:
    args = capture_args("Deployment note: rotate the credential below.", extra_text="ordinary context")
    args = copy.deepcopy(args)
    if place == "component":
        args["payload"]["components"][0]["text"] = f"Deployment note, credential follows: {text}"
    elif place == "context":
        args["payload"]["components"][1]["text"] = text
    elif place == "locator":
        args["payload"]["citations"][0]["locator"]["value"] = text[:4096]
    elif place == "attestation":
        args["evidence"]["attestation"] = text[:4096]
    else:
        args["payload"]["citations"][0]["source_ref"] = text[:512]
    return args


def test_corpus_has_at_least_fifty_forms():
    assert len(corpus()) >= 50


async def test_every_secret_form_is_refused_and_never_stored(fresh):
    cases = corpus()
    refused: dict[str, str] = {}
    for mode in MODES:
        async with connect(fresh.url, ctx_token(principal=f"secrets-{mode}"), mode) as client:
            for i, (case, text) in enumerate(cases):
                place = PLACES[i % len(PLACES)] if mode == "legacy" else "component"
                result = await client.call_tool(CAPTURE, with_secret(text, place))
                env = check_envelope(CAPTURE, result)
                got = "ok" if env["ok"] else code(env)
                if got != "SECRET_DETECTED":
                    refused[f"{mode}/{place}/{case}"] = got
                else:
                    FIGURES["secrets: forms refused with SECRET_DETECTED"] += 1
    assert refused == {}, f"not refused: {refused}"
    fresh.engine.deps.store.purge_freed_pages()
    leaks = scan_dir(fresh.data_dir, [n for _, text in cases for n in needles(text)])
    assert leaks == {}, f"secret material on disk: {leaks}"
