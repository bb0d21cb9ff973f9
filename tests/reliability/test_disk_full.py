"""A full disk under a server's index directory: a real, small filesystem.

The server (`launcher.py`: the real app over a real engine, hashing test encoder, SQLite
store) runs with a tmpfs of its own on `DATA/index` (:mod:`small_disk`); the store and
the audit log stay on their disk. With that filesystem filled to the last byte:
admissions (which must project before they answer) and searches answer retriable codes,
never an empty success and never a list missing an acknowledged admission; nothing
acknowledged is lost; and once space returns the same server (no restart) projects what
it owed and answers from both channels again.

ENGRAM_DISKFULL_ROUNDS (default 1) repeats the fill, write and heal round.
Skipped, with the reason, where no mount namespace can be made (no unshare, or user
namespaces disabled for an unprivileged run).
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import small_disk
from rel_support import (
    FIGURES,
    HERE,
    PURPOSE,
    ServerProcess,
    call,
    capture_args,
    code,
    confirmed_token,
    ctx_token,
    env_int,
    key,
    scan_dir,
    unique_token,
    value,
)

from engram.models.codes import RETRIABLE
from engram.models.tools import CAPTURE, FORGET, GET, REQUEST_ADMISSION, SEARCH

INDEX_FS_BYTES = 48 * 2**20
HYBRID = {"minimum_channels": "lexical_and_semantic", "network": "forbid"}
RETRIABLE_CODES = {c.value for c in RETRIABLE}
CLIENT_TIMEOUT_S = 60.0
ROUNDS = env_int("ENGRAM_DISKFULL_ROUNDS", 1)

pytestmark = pytest.mark.skipif(small_disk.unavailable() is not None, reason=str(small_disk.unavailable()))


class SmallDiskServer(ServerProcess):
    """`launcher.py` on `data_dir`, its index directory on a small filesystem of its own."""

    def __init__(self, data_dir: Path, log: Path) -> None:
        self.data_dir = data_dir
        (data_dir / "index").mkdir(parents=True)
        super().__init__(
            lambda port: small_disk.on_small_disk(
                [sys.executable, str(HERE / "launcher.py"), str(data_dir), str(port)],
                data_dir / "index",
                INDEX_FS_BYTES,
            ),
            log,
            cwd=HERE.parents[1],
        )

    @property
    def index(self) -> Path:
        """The small filesystem, as this process sees it (through the server's root)."""
        assert self.proc is not None
        return Path(f"/proc/{self.proc.pid}/root") / str(self.data_dir / "index").lstrip("/")


def ask(server: SmallDiskServer, tool: str, args: dict[str, Any], token: str | None = None) -> dict[str, Any]:
    return asyncio.run(asyncio.wait_for(call(server.url, token or ctx_token(), "auto", tool, args), CLIENT_TIMEOUT_S))


def retriable(env: dict[str, Any]) -> bool:
    if env["ok"]:
        return False
    assert code(env) in RETRIABLE_CODES and env["error"]["retriable"] is True, env
    return True


def found(server: SmallDiskServer, word: str, policy: dict[str, str] | None = None) -> list[str] | None:
    """The record ids a search for `word` answers, or None for a retriable answer."""
    args: dict[str, Any] = {"query": word, "purpose_ref": PURPOSE}
    if policy:
        args["capability_policy"] = policy
    env = ask(server, SEARCH, args)
    if retriable(env):
        return None
    return [p["record"]["record_id"] for p in value(env)["records"]]


def settled(server: SmallDiskServer, tool: str, args: dict[str, Any], met: Counter[str]) -> dict[str, Any]:
    """Retried with the same key until a clear outcome."""
    for _ in range(50):
        env = ask(server, tool, args)
        if not retriable(env):
            return value(env)
        met[code(env)] += 1
    raise AssertionError(f"{tool} still {code(env)} after 50 tries")


@pytest.fixture
def server(tmp_path: Path):
    running = SmallDiskServer(tmp_path / "data", tmp_path / "server.log").start()
    try:
        yield running
    finally:
        running.stop()


def admitted(server: SmallDiskServer, text: str, met: Counter[str]) -> str:
    cap = settled(server, CAPTURE, capture_args(text), met)
    adm = settled(server, REQUEST_ADMISSION, {"candidate_id": cap["candidate_id"], "idempotency_key": key()}, met)
    return adm["outcome"]["record_id"]


def test_full_index_disk_answers_retriable_and_heals_without_restart(server: SmallDiskServer) -> None:
    met: Counter[str] = Counter()
    answers: Counter[str] = Counter()
    before_word = unique_token()
    before_id = admitted(server, f"Written before the disk filled {before_word}.", met)
    assert found(server, before_word) == [before_id]
    acknowledged: dict[str, str] = {}
    for _ in range(ROUNDS):
        acknowledged.update(full_disk_round(server, before_word, before_id, met, answers))
    assert answers["search retriable"] > 0, answers  # the full disk was met, not stepped around

    after = unique_token()
    after_id = admitted(server, f"Written after space returned {after}.", met)
    assert (found(server, after, HYBRID) or [None])[0] == after_id
    assert (found(server, before_word) or [None])[0] == before_id
    lost = [
        rid for rid in acknowledged.values() if not ask(server, GET, {"record_id": rid, "purpose_ref": PURPOSE})["ok"]
    ]
    assert lost == []
    FIGURES["disk full: fill and heal rounds"] += ROUNDS
    FIGURES["disk full: admissions acknowledged on a full index disk"] += len(acknowledged)
    FIGURES["disk full: acknowledged mutations lost"] += len(lost)
    FIGURES["disk full: retriable answers"] += sum(n for k, n in answers.items() if "ok" not in k) + sum(met.values())


def full_disk_round(
    server: SmallDiskServer, before_word: str, before_id: str, met: Counter[str], answers: Counter[str]
) -> dict[str, str]:
    """Fill the index filesystem; admit, search and forget on it; give the space back;
    check the purge completes and everything acknowledged is projected. The words and
    record ids acknowledged on the full disk."""
    doomed_word = unique_token()
    doomed_id = admitted(server, f"Forgotten while the disk is full {doomed_word}.", met)
    assert scan_dir(server.index, [doomed_word]), "control: the scan sees the words in the index files"
    filler = small_disk.Filler(server.index)
    assert filler.fill() > 0
    acknowledged: dict[str, str] = {}
    try:
        for word in [unique_token() for _ in range(3)]:
            cap = settled(server, CAPTURE, capture_args(f"Written on a full index disk {word}."), met)
            args = {"candidate_id": cap["candidate_id"], "idempotency_key": key()}
            first = ask(server, REQUEST_ADMISSION, args)  # it must project before it answers
            answers["admission " + ("ok" if first["ok"] else code(first))] += 1
            if retriable(first):
                first = ask(server, REQUEST_ADMISSION, args)  # the retry replays what committed
            acknowledged[word] = value(first)["outcome"]["record_id"]
            for policy in (None, HYBRID):
                hits = found(server, word, policy)
                answers["search " + ("retriable" if hits is None else "ok")] += 1
                # Never a list that misses what was just acknowledged.
                assert hits is None or acknowledged[word] in hits, (word, hits)
            hits = found(server, before_word)
            assert hits is None or hits[0] == before_id
            assert value(ask(server, GET, {"record_id": acknowledged[word], "purpose_ref": PURPOSE}))
        forget_args = {"record_id": doomed_id, "idempotency_key": key(), "reason_ref": "reason:disk-full"}
        forget_token = confirmed_token(FORGET, forget_args, doomed_id)
        forgotten = ask(server, FORGET, forget_args, forget_token)
        answers["forget " + ("ok" if forgotten["ok"] else code(forgotten))] += 1
        if retriable(forgotten):
            forgotten = ask(server, FORGET, forget_args, forget_token)
        assert value(forgotten)["projection_invalidation"] == "pending"  # said so, not "complete"
        assert code(ask(server, GET, {"record_id": doomed_id, "purpose_ref": PURPOSE})) == "NOT_FOUND"
        assert doomed_id not in (found(server, doomed_word) or [])
    finally:
        filler.free()

    # Space is back. Before any call: the forget's purge, left pending by the full disk,
    # completes on its own in the same process (its text leaves the index files).
    guard = time.monotonic() + 90
    while scan_dir(server.index, [doomed_word]):
        assert time.monotonic() < guard, "the pending purge was not completed once space returned"
        time.sleep(0.2)

    # The same process projects what it owed and serves both channels.
    for word, record_id in acknowledged.items():
        for policy in (None, HYBRID):
            hits = None
            for _ in range(50):
                hits = found(server, word, policy)
                if hits is not None:
                    break
            assert hits and hits[0] == record_id, (word, policy, hits)  # first: its word is its own
    return acknowledged
