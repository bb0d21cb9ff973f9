"""Bulk ingestion of corpora (BEIR layout) and scope export, for `engram ingest`.

An outer room: it calls the engine's declared surface (``engram.service.engine``) and
nothing imports it but the CLI's plugin table. Its surface is its modules.
"""

__all__ = [
    "cli",
    "export",
    "ingest",
    "readers",
    "records",
    "worker_start",
    "writer",
]
