"""Scopes routed to replica groups: two groups of two `engram serve` processes on one
PostgreSQL database, every call sent to any of the four over MCP/HTTP.

Each scope is claimed by the group that first serves it; every other replica forwards
its calls there. Checked: every call answered the same whichever replica took it, only
the owning group's index files hold a scope, a forwarded call is never forwarded again,
a scope routed to a group with no live replica answers a retriable envelope, a killed
replica's group keeps serving (and a forget waits only for that group's live
replicas), and a scope moved to the other group with `engram admin route move` loses
no acknowledged admission while its old group's index files lose its text.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import httpx2
import psycopg
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from rel_support import (
    PURPOSE,
    SECRET,
    ReplicaProcess,
    call,
    capture_args,
    check_envelope,
    claims,
    code,
    key,
    scan_dir,
    unique_token,
    value,
)

from engram.models.host_token import HEADER, mint_token
from engram.models.tools import CAPTURE, FORGET, GET, REQUEST_ADMISSION, SEARCH
from engram.service.engine.gates import operation_digest
from engram.service.http.router import FORWARDED_HEADER

ROOT = Path(__file__).resolve().parents[2]
MODE = "auto"
GROUPS = {"a1": "alpha", "a2": "alpha", "b1": "beta", "b2": "beta"}


class GroupReplica(ReplicaProcess):
    """One `engram serve --database-url --group` process, its data directory its own."""

    def __init__(self, name: str, root: Path, database_url: str, key_dir: Path) -> None:
        self.group = GROUPS[name]
        super().__init__(name, root, database_url, key_dir, "--group", self.group)


def _admin(root: Path, url: str, *args: str) -> subprocess.CompletedProcess[str]:
    (root / "operator").mkdir(exist_ok=True)
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "engram.service.cli",
            "admin",
            "--database-url",
            url,
            "--key-dir",
            str(root / "keys"),
            *args,
            "--data-dir",
            str(root / "operator"),
        ],
        capture_output=True,
        text=True,
        cwd=str(ROOT),
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=180,
    )


@pytest.fixture(scope="module")
def groups(postgres_cluster, tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("groups")
    url = postgres_cluster.create_database("groups")
    done = _admin(root, url, "tenant", "enable", "acme")  # migrates, creates the KEK, opts acme in
    assert done.returncode == 0, done.stderr
    replicas = {name: GroupReplica(name, root, url, root / "keys").launch() for name in GROUPS}
    try:
        for r in replicas.values():
            r.wait_ready()
        yield root, url, replicas
    finally:
        for r in replicas.values():
            r.stop()


def token_for(workspace: str, **extra: Any) -> str:
    return mint_token(claims(workspace=workspace, **extra), SECRET, ttl_s=3600)


def run(replica: GroupReplica, tool: str, args: dict[str, Any], token: str) -> dict[str, Any]:
    return asyncio.run(call(replica.url, token, MODE, tool, args))


def accept_on(replica: GroupReplica, workspace: str, text: str) -> str:
    token = token_for(workspace)
    cap = value(run(replica, CAPTURE, capture_args(text), token))
    out = value(
        run(replica, REQUEST_ADMISSION, {"candidate_id": cap["candidate_id"], "idempotency_key": key("adm")}, token)
    )
    assert out["outcome"]["status"] == "accepted", out
    return out["outcome"]["record_id"]


def search_ids(replica: GroupReplica, workspace: str, query: str, limit: int = 50) -> list[str]:
    out = value(run(replica, SEARCH, {"query": query, "purpose_ref": PURPOSE, "limit": limit}, token_for(workspace)))
    return [r["record"]["record_id"] for r in out["records"]]


def route_of(url: str, workspace: str) -> tuple[str, str | None] | None:
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT replica_group, moving_to FROM scope_routes WHERE tenant='acme' AND workspace=%s", (workspace,)
        ).fetchone()
    return None if row is None else (row[0], row[1])


def holders(replicas: dict[str, GroupReplica], words: list[str]) -> set[str]:
    """The replicas whose index files hold any of `words`."""
    return {name for name, r in replicas.items() if scan_dir(r.data_dir / "index", words)}


def wait_not_live(url: str, data_dir: Path, timeout_s: float = 20.0) -> None:
    """Until the replica of `data_dir` has missed its heartbeats long enough to count as down."""
    replica_id = (data_dir / "replica_id").read_text().strip()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with psycopg.connect(url) as conn:
            age = conn.execute(
                "SELECT (extract(epoch from now()) * 1000)::bigint - heartbeat_ms FROM replicas WHERE replica_id=%s",
                (replica_id,),
            ).fetchone()[0]
        if age > 5_500:
            return
        time.sleep(0.25)
    raise AssertionError("replica still counts as live")


def confirmed(workspace: str, tool: str, args: dict[str, Any], target: str) -> str:
    approved = int(time.time() * 1000) - 200
    return token_for(
        workspace,
        confirmation={
            "ref": "conf-" + uuid.uuid4().hex,
            "capability": tool,
            "target": target,
            "operation_digest": operation_digest(tool, args),
            "approved_at": approved,
            "expires_at": approved + 60_000,
        },
    )


def test_calls_answered_the_same_on_every_replica(groups) -> None:
    root, url, replicas = groups
    # The first call of a scope claims it for the group of the replica that serves it.
    word_a, word_b = unique_token(), unique_token()
    first_a = accept_on(replicas["a1"], "ws-alpha", f"Alpha note about {word_a} one.")
    first_b = accept_on(replicas["b2"], "ws-beta", f"Beta note about {word_b} one.")
    assert route_of(url, "ws-alpha") == ("alpha", None) and route_of(url, "ws-beta") == ("beta", None)
    made = {"ws-alpha": [first_a], "ws-beta": [first_b]}
    for name, r in replicas.items():  # every replica admits into both scopes
        made["ws-alpha"].append(accept_on(r, "ws-alpha", f"Alpha note about {word_a} from {name}."))
        made["ws-beta"].append(accept_on(r, "ws-beta", f"Beta note about {word_b} from {name}."))
    for workspace, word in (("ws-alpha", word_a), ("ws-beta", word_b)):
        # The same records whichever replica took the search (their order moves with the
        # clock: near-equal scores are separated by recency as of the call).
        answers = {name: sorted(search_ids(r, workspace, word)) for name, r in replicas.items()}
        assert all(ids == sorted(made[workspace]) for ids in answers.values()), answers
        rid = made[workspace][0]
        records = [
            value(run(r, GET, {"record_id": rid, "purpose_ref": PURPOSE}, token_for(workspace)))["record"]
            for r in replicas.values()
        ]
        assert all(rec == records[0] for rec in records)
    # Only the owning group keeps a scope's indexes.
    assert holders(replicas, [word_a]) == {"a1", "a2"}
    assert holders(replicas, [word_b]) == {"b1", "b2"}


def test_a_handshake_era_session_is_forwarded_whole(groups) -> None:
    _, url, replicas = groups
    word = unique_token()
    rid = accept_on(replicas["a2"], "ws-legacy", f"Legacy note {word}.")
    assert route_of(url, "ws-legacy") == ("alpha", None)
    for r in (replicas["b1"], replicas["b2"]):  # initialize, the session's calls, its end: all relayed
        out = value(
            asyncio.run(call(r.url, token_for("ws-legacy"), "legacy", SEARCH, {"query": word, "purpose_ref": PURPOSE}))
        )
        assert [x["record"]["record_id"] for x in out["records"]] == [rid]


def test_a_forwarded_call_is_never_forwarded_again(groups) -> None:
    _, _, replicas = groups
    accept_on(replicas["b1"], "ws-loop", f"Loop note {unique_token()}.")  # beta serves ws-loop

    async def marked_search() -> dict[str, Any]:
        headers = {HEADER: token_for("ws-loop"), FORWARDED_HEADER.decode(): "some-replica"}
        async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(60.0)) as http:
            async with Client(streamable_http_client(replicas["a1"].url, http_client=http), mode=MODE) as client:
                result = await client.call_tool(SEARCH, {"query": "loop", "purpose_ref": PURPOSE})
        return check_envelope(SEARCH, result)

    env = asyncio.run(marked_search())  # answered on alpha, which does not serve it
    assert code(env) == "STORE_UNAVAILABLE" and env["error"]["retriable"] is True


def test_a_group_with_no_live_replica_answers_retriable(groups) -> None:
    _, url, replicas = groups
    with psycopg.connect(url) as conn:
        conn.execute("INSERT INTO scope_routes VALUES ('acme', 'ws-gamma', 'gamma', NULL, 1)")
    for r in (replicas["a1"], replicas["b1"]):
        for tool, args in (
            (SEARCH, {"query": "anything", "purpose_ref": PURPOSE}),
            (CAPTURE, capture_args(f"Gamma note {unique_token()}.")),
        ):
            env = run(r, tool, args, token_for("ws-gamma"))
            assert code(env) == "STORE_UNAVAILABLE" and env["error"]["retriable"] is True


def test_a_killed_replica_group_keeps_serving(groups) -> None:
    _, url, replicas = groups
    a2 = replicas["a2"]
    word = unique_token()
    before = [accept_on(replicas["b1"], "ws-kill", f"Kill note {word} {i}.") for i in range(2)]
    assert route_of(url, "ws-kill") == ("beta", None)
    doomed_word = unique_token()
    doomed = accept_on(replicas["a1"], "ws-kill", f"Doomed note {word} and {doomed_word}.")
    # kill -9 of a beta replica: the scope is still served, through every other replica
    b2 = replicas["b2"]
    b2.kill()
    after = [accept_on(r, "ws-kill", f"Kill note {word} after {name}.") for name, r in replicas.items() if name != "b2"]
    for name, r in replicas.items():
        if name != "b2":
            assert set(search_ids(r, "ws-kill", word)) == {*before, doomed, *after}
    # once b2 counts as down, a forget (sent to alpha, forwarded to b1) waits only for b1
    wait_not_live(url, b2.data_dir)
    args = {"record_id": doomed, "idempotency_key": key("fgt"), "reason_ref": "reason:x"}
    out = value(run(a2, FORGET, args, confirmed("ws-kill", FORGET, args, doomed)))
    assert out["projection_invalidation"] == "complete"
    # the killed replica comes back: purges what it missed, catches up
    b2.start()
    assert set(search_ids(b2, "ws-kill", word)) == {*before, *after}
    assert scan_dir(b2.data_dir / "index", [doomed_word]) == {}


def test_moving_a_scope_loses_nothing(groups) -> None:
    root, url, replicas = groups
    word = unique_token()
    secret_words = [unique_token() for _ in range(4)]
    first, then = " and ".join(secret_words[:2]), " and ".join(secret_words[2:])
    acknowledged = [accept_on(replicas["a2"], "ws-move", f"Move note {word} {first} first.")]
    acknowledged += [accept_on(r, "ws-move", f"Move note {word} {then} via {name}.") for name, r in replicas.items()]
    assert route_of(url, "ws-move") == ("alpha", None)
    for r in replicas.values():  # each alpha replica has applied every admission (read your writes)
        assert set(acknowledged) <= set(search_ids(r, "ws-move", word))
    assert holders(replicas, secret_words) == {"a1", "a2"}
    lock, stop = threading.Lock(), threading.Event()

    def storm() -> None:  # admissions through every replica while the scope moves
        for i in range(8):
            if stop.is_set():
                return
            r = list(replicas.values())[i % 4]
            try:
                rid = accept_on(r, "ws-move", f"Move note {word} storm {i}.")
            except AssertionError:  # a retriable answer while the route flips: not acknowledged
                continue
            with lock:
                acknowledged.append(rid)

    writer = threading.Thread(target=storm)
    writer.start()
    moved = _admin(root, url, "route", "move", "acme", "ws-move", "beta")
    writer.join(timeout=120)
    stop.set()
    assert moved.returncode == 0, moved.stderr
    outcome = json.loads(moved.stdout)
    assert outcome["group"] == "beta" and outcome["previous_group"] == "alpha"
    assert outcome["route_flipped"] is True and outcome["old_group_purge"] == "complete"
    assert route_of(url, "ws-move") == ("beta", None)
    listed = json.loads(_admin(root, url, "route", "list").stdout)
    assert {"tenant": "acme", "workspace": "ws-move", "group": "beta", "moving_to": None} in [
        {k: v for k, v in e.items() if k != "version"} for e in listed
    ]
    for r in replicas.values():  # every acknowledged admission, found through every replica
        assert set(acknowledged) <= set(search_ids(r, "ws-move", word))
    assert holders(replicas, secret_words) == {"b1", "b2"}  # alpha's index files lost its text
