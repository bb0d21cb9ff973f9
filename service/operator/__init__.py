"""The operator channel: one owner per data directory, and a local socket into it.

Not the operator role itself: what an operator may do is ``Engine.operator``
(``service/engine/operator.py``); this room carries those calls into a live server's
process, or runs them on an engine it opened while it owns the directory.

Why a room of its own: maintenance (key rotation, backup, expiry, transitions,
rebuilds) must never run as a second engine beside a live server (two key rings and two
index writers on one directory lose data), and must never be reachable over MCP. The
server holds an exclusive lock on its data directory and listens on a Unix socket in
it (mode 0600, peers checked to be the owner); admin commands go through that socket
while a server is up, and take the lock themselves when none is.

Its surface is its modules, each imported by name.
"""

__all__ = [
    "channel",
    "commands",
    "ownership",
]
