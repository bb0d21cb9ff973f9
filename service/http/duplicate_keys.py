"""Duplicate JSON object keys in tool arguments are INVALID_SCHEMA, not "last one wins".

The SDK parses request bodies with a parser that silently keeps the last duplicate,
so by the time a tool handler sees the arguments the evidence is gone. This ASGI
middleware reads each POSTed JSON-RPC body once more with a strict parser and, when a
`tools/call` message's arguments repeat a key anywhere, marks the request with a
header the handler checks. Any client-sent copy of that header is stripped first.
"""

from __future__ import annotations

import json
from collections.abc import MutableMapping
from typing import Any

from engram.service.mcp.server import MARK_HEADER


class _Duplicate(ValueError):
    pass


def _strict_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        raise _Duplicate()
    return dict(pairs)


def has_duplicate_keys_in_tool_call(body: bytes) -> bool:
    """Whether `body` is a tools/call request whose JSON repeats a key anywhere.

    A repeated key outside the arguments (say, a doubled "id") is just as malformed,
    so the whole message is checked, which keeps this one strict parse."""
    try:
        json.loads(body, object_pairs_hook=_strict_object)
        return False
    except _Duplicate:
        pass
    except (ValueError, RecursionError):
        return False  # not JSON: the SDK answers the parse error itself
    try:
        loose = json.loads(body)
    except (ValueError, RecursionError):
        return False
    messages = loose if isinstance(loose, list) else [loose]
    return any(isinstance(m, dict) and m.get("method") == "tools/call" for m in messages)


class DuplicateKeyMarker:
    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        more = True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                await self.app(scope, receive, send)
                return
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = b"".join(chunks)
        headers = [(k, v) for k, v in scope["headers"] if k.lower() != MARK_HEADER]
        if has_duplicate_keys_in_tool_call(body):
            headers.append((MARK_HEADER, b"1"))
        replayed = False

        async def replay() -> dict[str, Any]:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app({**scope, "headers": headers}, replay, send)
