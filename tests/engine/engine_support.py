"""Helpers shared by the engine tests (and the crash worker subprocess).

The deterministic `HashingTestEncoder` is the ranking tests' own (tests/ranking/
conftest.py), loaded by path so that this directory needs no package layout.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


from factories import PURPOSE, capture_args, confirmed, context, key  # noqa: E402
from ranking_support import HashingTestEncoder  # noqa: E402,F401 - re-exported

from engram.models.codes import MESSAGES, ContractError, ErrorCode  # noqa: E402
from engram.models.tools import CAPTURE, FORGET, GET, REQUEST_ADMISSION, SEARCH, WITHDRAW  # noqa: E402
from engram.service.engine import DB_FILE, CallContext, Engine  # noqa: E402
from engram.service.store import DEFAULT_DATABASE_TIMEOUT_MS, StoreAddress  # noqa: E402

__all__ = [
    "CAPTURE",
    "FORGET",
    "GET",
    "PURPOSE",
    "REQUEST_ADMISSION",
    "SEARCH",
    "WITHDRAW",
    "CallContext",
    "ContractError",
    "Engine",
    "ErrorCode",
    "HashingTestEncoder",
    "MESSAGES",
    "accept",
    "admit",
    "capture",
    "capture_args",
    "confirmed",
    "context",
    "error_of",
    "files_containing",
    "forget",
    "get",
    "key",
    "open_engine",
    "search",
    "withdraw",
]


class Backend:
    """The store the engines of the running test open: SQLite in the data directory
    (database_url None), or the PostgreSQL database the `engine` fixture selected."""

    database_url: str | None = None


def open_engine(
    data_dir: Path,
    *,
    database_url: str | None = None,
    database_timeout_ms: int = DEFAULT_DATABASE_TIMEOUT_MS,
    **kwargs: Any,
) -> Engine:
    """`Engine.open` with the test encoder, on the database at ``database_url`` (default:
    the store `Backend` names)."""
    if "encoder" not in kwargs and kwargs.get("load_model", True):
        kwargs["encoder"] = HashingTestEncoder()
    kwargs.setdefault("load_model", False)
    url = database_url or Backend.database_url
    if url is not None:
        kwargs.setdefault("store", StoreAddress(url, database_timeout_ms))
    return Engine.open(Path(data_dir), **kwargs)


def tamper(eng: Engine, statement: str) -> None:
    """Run one raw SQL statement behind the engine's back (tampering tests), on
    whichever store it opened."""
    if Backend.database_url is None:
        eng.deps.store._writer.execute(statement)  # noqa: SLF001
        return
    import psycopg

    with psycopg.connect(Backend.database_url, autocommit=True) as conn:
        conn.execute(statement)


def error_of(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> ContractError:
    """The ContractError `fn` raises (fails the test when it returns or raises otherwise)."""
    try:
        result = fn(*args, **kwargs)
    except ContractError as exc:
        assert exc.message == MESSAGES[exc.code]
        return exc
    raise AssertionError(f"expected a ContractError, got {result!r}")


def code_of(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> ErrorCode:
    return error_of(fn, *args, **kwargs).code


def capture(eng: Engine, ctx: CallContext, text: str, **kwargs: Any) -> tuple[dict, dict]:
    args = capture_args(text, **kwargs)
    return args, eng.execute(CAPTURE, ctx, args)


def admit(eng: Engine, ctx: CallContext, candidate_id: str, idem: str | None = None) -> dict:
    return eng.execute(REQUEST_ADMISSION, ctx, {"candidate_id": candidate_id, "idempotency_key": idem or key("adm")})


def accept(eng: Engine, ctx: CallContext, text: str, **kwargs: Any) -> str:
    """Capture and admit `text`; the record_id (asserts acceptance)."""
    _, cap = capture(eng, ctx, text, **kwargs)
    out = admit(eng, ctx, cap["candidate_id"])
    assert out["outcome"]["status"] == "accepted", out
    return out["outcome"]["record_id"]


def withdraw_args(candidate_id: str, reason: str = "reason:not-needed") -> dict:
    return {"candidate_id": candidate_id, "idempotency_key": key("wdr"), "reason_ref": reason}


def withdraw(eng: Engine, ctx: CallContext, candidate_id: str, args: dict | None = None) -> dict:
    args = args or withdraw_args(candidate_id)
    return eng.execute(WITHDRAW, confirmed(ctx, WITHDRAW, candidate_id, args), args)


def forget_args(record_id: str, reason: str = "reason:obsolete") -> dict:
    return {"record_id": record_id, "idempotency_key": key("fgt"), "reason_ref": reason}


def forget(eng: Engine, ctx: CallContext, record_id: str, args: dict | None = None) -> dict:
    args = args or forget_args(record_id)
    return eng.execute(FORGET, confirmed(ctx, FORGET, record_id, args), args)


def search(eng: Engine, ctx: CallContext, query: str, **kwargs: Any) -> dict:
    return eng.execute(SEARCH, ctx, {"query": query, "purpose_ref": PURPOSE, **kwargs})


def search_ids(eng: Engine, ctx: CallContext, query: str, **kwargs: Any) -> list[str]:
    return [p["record"]["record_id"] for p in search(eng, ctx, query, **kwargs)["records"]]


def get(eng: Engine, ctx: CallContext, record_id: str, **kwargs: Any) -> dict:
    return eng.execute(GET, ctx, {"record_id": record_id, "purpose_ref": PURPOSE, **kwargs})


def files_containing(directory: Path, needle: bytes) -> list[str]:
    """Every file under `directory` whose raw bytes contain `needle`."""
    hits = []
    for path in sorted(Path(directory).rglob("*")):
        if path.is_file() and needle in path.read_bytes():
            hits.append(str(path.relative_to(directory)))
    return hits


def copied_back(backup: Path, data_dir: Path, keys: Path) -> Engine:
    """A backup's SQLite file copied by hand into the new ``data_dir`` (no `engram admin
    restore`), opened beside the live ``keys``: the shred ledger there is what remembers
    a forget the copy predates."""
    data_dir.mkdir(mode=0o700)
    shutil.copy2(backup / DB_FILE, data_dir / DB_FILE)
    return open_engine(data_dir, key_dir=keys)


def assert_only_kept(eng: Engine, ctx: CallContext, kept: str, doomed: str, marker: str) -> None:
    """``kept`` is readable and found by "harbour pilots"; ``doomed`` is NOT_FOUND and its
    ``marker`` in no file of the engine's data directory."""
    assert get(eng, ctx, kept)["record"]["record_id"] == kept
    assert error_of(get, eng, ctx, doomed).code is ErrorCode.NOT_FOUND
    assert search_ids(eng, ctx, "harbour pilots") == [kept]
    assert files_containing(eng.deps.data_dir, marker.encode()) == []


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
