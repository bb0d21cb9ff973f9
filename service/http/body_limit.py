"""A cap on HTTP request bodies, enforced before anything reads them (authentication
included): an unauthenticated client must not make the server buffer gigabytes.

Why 8 x MAX_ARGUMENT_BYTES: the largest legitimate call carries 1 MiB of arguments,
which a client may JSON-escape (\\uXXXX) and wrap in a JSON-RPC envelope; 8 MiB covers
every such encoding, and anything larger can only be refused later anyway. A declared
Content-Length over the cap is refused at once; a chunked body is counted as it arrives.
"""

from __future__ import annotations

import json
from typing import Any

from engram.models.inputs import MAX_ARGUMENT_BYTES

MAX_REQUEST_BYTES = 8 * MAX_ARGUMENT_BYTES

Scope = dict[str, Any]


class _TooLarge(Exception):
    pass


async def _refuse(send: Any) -> None:
    body = json.dumps({"error": "request body too large", "max_bytes": MAX_REQUEST_BYTES}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class BodyLimit:
    """ASGI middleware: 413 for a request body over `max_bytes`."""

    def __init__(self, app: Any, max_bytes: int = MAX_REQUEST_BYTES) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers", [])).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_bytes):
            await _refuse(send)
            return
        received = 0
        started = False

        async def counted() -> Any:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise _TooLarge()
            return message

        async def watched(message: Any) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted, watched)
        except _TooLarge:
            if not started:
                await _refuse(send)
