"""Append-only audit log: one JSON line per tool call, never memory content.

Why: operators must be able to reconstruct who called what, in which scope, with which
outcome, without the log itself becoming a copy of the memory. So each line holds only
identifiers, the outcome code, timings, and digests of the arguments (domain-separated
sha256 over their JCS bytes) and of the response (over the exact JSON text the caller
was sent, which the front end has serialised anyway), never the arguments or results;
a search's line also names its rank receipt by digest (the operator console's way back
to it).

Durability, per line (`Durability`): every line is handed to the operating system
(`write`) before the call's answer leaves, so it survives the process being killed. A
mutation's line is also on disk before its answer leaves (`SYNCED`), as durable as the
mutation it records. One syncer thread makes lines durable with group commit: each
`fdatasync` covers every line written before it began, so concurrent calls share one
flush instead of queueing for one each, and a read's line (`WRITTEN`) is flushed by the
next group without its caller waiting for the disk.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from enum import StrEnum
from pathlib import Path
from typing import Any

from engram.models.digests import CanonicalizationRefused, canonical_bytes

#: The fields of an audit line, in the order written: identifiers, the outcome code,
#: digests and a timing, never content. The operator console shows these and no others.
AUDIT_FIELDS = (
    "time",
    "auditId",
    "tool",
    "tenant",
    "workspace",
    "principal",
    "code",
    "arguments_digest",
    "response_digest",
    "receipt_digest",
    "latency_ms",
)


class Durability(StrEnum):
    """How far a call's audit line has got before the call answers."""

    WRITTEN = "written"  # in the OS's page cache: survives the process, not a power cut
    SYNCED = "synced"  # flushed to disk (fdatasync): survives a power cut too


def audit_digest(kind: str, value: Any) -> str:
    """`sha256:` over `engram/audit-<kind>/v1\\0` + JCS(value); plain JSON as fallback."""
    try:
        body = canonical_bytes(value)
    except (CanonicalizationRefused, TypeError, ValueError):
        body = json.dumps(value, sort_keys=True, default=repr, ensure_ascii=False).encode("utf-8", "replace")
    return _digest(kind, body)


def audit_text_digest(kind: str, text: str) -> str:
    """`sha256:` over `engram/audit-<kind>/v1\\0` + the UTF-8 bytes of ``text`` as sent."""
    return _digest(kind, text.encode("utf-8", "replace"))


def _digest(kind: str, body: bytes) -> str:
    return "sha256:" + hashlib.sha256(f"engram/audit-{kind}/v1\0".encode() + body).hexdigest()


class _Group:
    """The lines written since the syncer's last flush began; one flush settles them all."""

    __slots__ = ("lines", "done", "error")

    def __init__(self) -> None:
        self.lines = 0
        self.done = False
        self.error: OSError | None = None


_flush = getattr(os, "fdatasync", os.fsync)


class AuditLog:
    """Thread-safe appender of JSON lines to `path` (mode 0600), flushed by group commit."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        self._file = os.fdopen(fd, "ab", buffering=0)
        self._changed = threading.Condition(threading.Lock())
        self._open = _Group()  # collecting lines; the syncer takes it when it flushes
        self._closing = False
        self._syncer: threading.Thread | None = None  # started with the first line

    def record(
        self,
        *,
        audit_id: str,
        tool: str,
        code: str,
        latency_ms: float,
        tenant: str | None = None,
        workspace: str | None = None,
        principal: str | None = None,
        arguments_digest: str | None = None,
        response_digest: str | None = None,
        receipt_digest: str | None = None,
        durability: Durability = Durability.SYNCED,
    ) -> None:
        """Append one line; return once it is as durable as ``durability`` asks.
        Raises OSError when the line could not be written or flushed."""
        now_ms = time.time_ns() // 1_000_000
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now_ms // 1000)) + f".{now_ms % 1000:03d}Z"
        values = (
            stamp,
            audit_id,
            tool,
            tenant,
            workspace,
            principal,
            code,
            arguments_digest,
            response_digest,
            receipt_digest,
            round(latency_ms, 3),
        )
        line = dict(zip(AUDIT_FIELDS, values, strict=True))
        data = (json.dumps(line, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")
        with self._changed:
            if self._closing:
                raise OSError("audit log closed")
            self._file.write(data)  # unbuffered O_APPEND: one write(2) per line
            if self._syncer is None:
                self._syncer = threading.Thread(target=self._sync_loop, name="engram-audit-sync", daemon=True)
                self._syncer.start()
            group = self._open
            group.lines += 1
            self._changed.notify_all()
            if durability is Durability.WRITTEN:
                return
            while not group.done:
                self._changed.wait()
        if group.error is not None:
            raise OSError("audit line not flushed") from group.error

    def _sync_loop(self) -> None:
        """Flush whatever was written since the last flush, until closed and drained."""
        while True:
            with self._changed:
                while self._open.lines == 0 and not self._closing:
                    self._changed.wait()
                if self._open.lines == 0:
                    return  # closing, and nothing is left to flush
                group, self._open = self._open, _Group()
            error: OSError | None = None
            try:
                _flush(self._file.fileno())
            except OSError as exc:
                error = exc
            with self._changed:
                group.error, group.done = error, True
                self._changed.notify_all()

    def close(self) -> None:
        """Flush what is written, stop the syncer and close the file (idempotent)."""
        with self._changed:
            self._closing = True
            self._changed.notify_all()
            syncer = self._syncer
        if syncer is not None:
            syncer.join()
        if not self._file.closed:
            self._file.close()
