"""Append-only audit log: one JSON line per tool call, fsync'd, never memory content.

Why: operators must be able to reconstruct who called what, in which scope, with which
outcome, without the log itself becoming a copy of the memory. So each line holds only
identifiers, the outcome code, timings, and digests of the arguments (domain-separated
sha256 over their JCS bytes) and of the response (over the exact JSON text the caller
was sent, which the front end has serialised anyway), never the arguments or results.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from pathlib import Path
from typing import Any

from models.digests import CanonicalizationRefused, canonical_bytes

AUDIT_FILE = "audit.jsonl"


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


class AuditLog:
    """Thread-safe appender of fsync'd JSON lines to `path` (mode 0600)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        self._file = os.fdopen(fd, "ab", buffering=0)

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
    ) -> None:
        now_ms = time.time_ns() // 1_000_000
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now_ms // 1000)) + f".{now_ms % 1000:03d}Z"
        line = {
            "time": stamp,
            "auditId": audit_id,
            "tool": tool,
            "tenant": tenant,
            "workspace": workspace,
            "principal": principal,
            "code": code,
            "arguments_digest": arguments_digest,
            "response_digest": response_digest,
            "latency_ms": round(latency_ms, 3),
        }
        data = (json.dumps(line, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")
        with self._lock:
            self._file.write(data)
            os.fsync(self._file.fileno())

    def close(self) -> None:
        with self._lock:
            if not self._file.closed:
                self._file.close()
