"""A fault-injecting TCP proxy on loopback, between a replica and its PostgreSQL server.

Why: the network between `engram serve --database-url` and the database fails in ways
a test cannot get from a stopped server: answers arrive late, connections drop, a
partition leaves connections half-open (nothing arrives, nothing closes), and a commit
is cut after the server received it but before its answer came back. The replica
connects to ``127.0.0.1:PORT`` here; each connection is forwarded to the server's unix
socket, byte for byte, and the client's side of the PostgreSQL protocol is framed (not
altered) so a fault can be aimed at the commit of a transaction that wrote a given table.

Faults, each switchable while connections are open (from any thread):

- ``delay(seconds)``: every chunk waits that long before it is forwarded, both ways;
- ``drop()``: every open connection is reset at once (new ones are served);
- ``black_hole()``: a partition. Nothing is forwarded on any connection, open or new,
  and nothing is closed: data and end-of-stream are held, as an unplugged cable holds
  them. ``heal()`` ends it; the connections it held are reset, as peers that gave up
  waiting meet a reset when the network returns;
- ``cut_commit(forwarded=...)``: the next COMMIT of a transaction that wrote
  ``marker`` is cut: forwarded to the server and its answer discarded (the commit
  landed, the client does not know), or not forwarded at all; the connection is reset;
- ``hold_commit()``: that COMMIT is never forwarded and its connection is black-holed
  alone: the server keeps the transaction open, with its locks, until it times out;
- ``partition_after_commit()``: that COMMIT and its answer go through, then the
  partition begins (the work a client does after its commit meets it).

It runs an asyncio loop in a thread of its own; nothing here knows about engram.
"""

from __future__ import annotations

import asyncio
import struct
import threading
from dataclasses import dataclass, field
from enum import Enum

#: Startup-phase request codes that are followed by another startup message.
_SSL_REQUEST, _GSSENC_REQUEST = 80877103, 80877104
_CHUNK = 65536


class CommitFault(Enum):
    FORWARDED = "forwarded"  # the server commits; its answer is lost
    DROPPED = "dropped"  # the server never sees the COMMIT
    HELD = "held"  # the server never sees it, and the connection stays open
    PARTITION_AFTER = "partition after"  # it commits, its answer arrives, then the partition


class _ClientFrames:
    """The client's side of the PostgreSQL wire protocol, framed into statements.

    Yields the SQL text each message asks the server to run: a simple query's text, or
    the text of the statement a Bind names (prepared statements are remembered from
    their Parse), so a statement is recognised however the driver sends it."""

    def __init__(self) -> None:
        self._buffer = b""
        self._startup = True
        self._statements: dict[bytes, str] = {}

    def feed(self, data: bytes) -> list[str]:
        self._buffer += data
        texts: list[str] = []
        while True:
            if self._startup:
                if len(self._buffer) < 8:
                    return texts
                length, code = struct.unpack("!ii", self._buffer[:8])
                if len(self._buffer) < length:
                    return texts
                self._buffer = self._buffer[length:]
                self._startup = code in (_SSL_REQUEST, _GSSENC_REQUEST)
                continue
            if len(self._buffer) < 5:
                return texts
            kind = self._buffer[:1]
            (length,) = struct.unpack("!i", self._buffer[1:5])
            if len(self._buffer) < 1 + length:
                return texts
            body, self._buffer = self._buffer[5 : 1 + length], self._buffer[1 + length :]
            if kind == b"Q":
                texts.append(body.split(b"\0", 1)[0].decode(errors="replace"))
            elif kind == b"P":
                name, rest = body.split(b"\0", 1)
                self._statements[name] = rest.split(b"\0", 1)[0].decode(errors="replace")
            elif kind == b"B":
                _portal, rest = body.split(b"\0", 1)
                texts.append(self._statements.get(rest.split(b"\0", 1)[0], ""))


@dataclass(eq=False)
class _Link:
    """One client connection and its upstream connection."""

    client: asyncio.StreamWriter
    upstream: asyncio.StreamWriter | None = None
    frames: _ClientFrames = field(default_factory=_ClientFrames)
    held: bool = False
    wrote_marker: bool = False
    discard_answer: bool = False
    partition_after_answer: bool = False
    released: asyncio.Event = field(default_factory=asyncio.Event)

    def reset(self) -> None:
        for writer in (self.client, self.upstream):
            if writer is not None:
                writer.transport.abort()
        self.released.set()


class FaultProxy:
    """Forwards 127.0.0.1:``port`` to the unix socket ``upstream_socket``."""

    def __init__(self, upstream_socket: str, *, marker: str = "INSERT INTO idempotency") -> None:
        self.upstream_socket = upstream_socket
        self.marker = marker.upper()
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="fault-proxy", daemon=True)
        self._server: asyncio.Server | None = None
        self._links: set[_Link] = set()
        self._delay_s = 0.0
        self._black_hole = False
        self._commit_fault: CommitFault | None = None
        self.accepted = 0  # connections accepted since start
        self.commits_cut = 0

    # -- life ------------------------------------------------------------------------------
    def start(self) -> FaultProxy:
        self._thread.start()
        self._call(self._listen())
        return self

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    def close(self) -> None:
        async def shut() -> None:
            if self._server is not None:
                self._server.close()
            for link in list(self._links):
                link.reset()

        self._call(shut())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)

    def _call(self, coro: object) -> object:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout=10)  # type: ignore[arg-type]

    def _run(self, fn: object) -> None:
        async def apply() -> None:
            fn()  # type: ignore[operator]

        self._call(apply())

    # -- faults ----------------------------------------------------------------------------
    def delay(self, seconds: float) -> None:
        self._delay_s = seconds

    def drop(self) -> None:
        """Reset every open connection."""

        def reset_all() -> None:
            for link in list(self._links):
                link.reset()

        self._run(reset_all)

    def black_hole(self) -> None:
        self._run(self._hold_all)

    def _hold_all(self) -> None:
        self._black_hole = True
        for link in self._links:
            link.held = True

    def heal(self) -> None:
        """End the partition, the delay and any armed commit fault; reset held links."""

        def release() -> None:
            self._black_hole = False
            self._delay_s = 0.0
            self._commit_fault = None
            for link in list(self._links):
                if link.held:
                    link.reset()

        self._run(release)

    def cut_commit(self, *, forwarded: bool) -> None:
        self._commit_fault = CommitFault.FORWARDED if forwarded else CommitFault.DROPPED

    def hold_commit(self) -> None:
        self._commit_fault = CommitFault.HELD

    def partition_after_commit(self) -> None:
        self._commit_fault = CommitFault.PARTITION_AFTER

    @property
    def open_links(self) -> int:
        return len(self._links)

    # -- forwarding --------------------------------------------------------------------------
    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        link = _Link(writer)
        self._links.add(link)
        self.accepted += 1
        try:
            if self._black_hole:  # a new connection into the partition: it never reaches the server
                link.held = True
                await self._drain_held(reader, link)
                return
            try:
                up_reader, up_writer = await asyncio.open_unix_connection(self.upstream_socket)
            except OSError:
                link.reset()
                return
            link.upstream = up_writer
            await asyncio.gather(
                self._pump(reader, up_writer, link, outbound=True),
                self._pump(up_reader, writer, link, outbound=False),
            )
        finally:
            self._links.discard(link)
            if not link.held:
                link.reset()

    async def _drain_held(self, reader: asyncio.StreamReader, link: _Link) -> None:
        """Read and keep nothing until the link is released (reset by heal or drop)."""
        while not link.released.is_set():
            reading = asyncio.ensure_future(reader.read(_CHUNK))
            released = asyncio.ensure_future(link.released.wait())
            done, _ = await asyncio.wait({reading, released}, return_when=asyncio.FIRST_COMPLETED)
            for task in (reading, released):
                if task not in done:
                    task.cancel()
            if reading in done and not reading.exception() and not reading.result():
                await link.released.wait()  # end of stream held too: the peer never learns

    async def _pump(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, link: _Link, *, outbound: bool
    ) -> None:
        try:
            while True:
                if link.held:
                    await self._drain_held(reader, link)
                    return
                data = await reader.read(_CHUNK)
                if link.held:  # held while this read waited: keep the bytes
                    await self._drain_held(reader, link)
                    return
                if link.released.is_set():  # reset meanwhile (drop, heal, a cut)
                    return
                if not data:
                    if writer.can_write_eof():
                        writer.write_eof()
                    return
                if self._delay_s:
                    await asyncio.sleep(self._delay_s)
                if outbound:
                    fault = self._commit_to_fault(link, data)
                    if fault is CommitFault.DROPPED:
                        link.reset()
                        return
                    if fault is CommitFault.HELD:
                        link.held = True
                        await self._drain_held(reader, link)
                        return
                    if fault is CommitFault.FORWARDED:
                        link.discard_answer = True
                    link.partition_after_answer = fault is CommitFault.PARTITION_AFTER
                elif link.discard_answer:  # the answer to the cut COMMIT: the commit landed
                    link.reset()
                    return
                writer.write(data)
                await writer.drain()
                if not outbound and link.partition_after_answer:  # the commit's answer went through
                    self._hold_all()
        except (ConnectionError, OSError, RuntimeError):
            link.reset()

    def _commit_to_fault(self, link: _Link, data: bytes) -> CommitFault | None:
        """The armed fault when ``data`` carries the COMMIT of a transaction that wrote the marker."""
        hit = False
        for text in link.frames.feed(data):
            statement = text.strip().upper()
            if statement.startswith("BEGIN"):
                link.wrote_marker = False
            elif statement.startswith(self.marker):
                link.wrote_marker = True
            # The COMMIT may close a query of several statements ("...; COMMIT").
            elif statement.rstrip("; ").endswith("COMMIT") and link.wrote_marker and self._commit_fault is not None:
                hit = True
        if not hit:
            return None
        fault, self._commit_fault = self._commit_fault, None
        self.commits_cut += 1
        return fault
