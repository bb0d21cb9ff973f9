"""Versioned schema migrations: ordered steps, a version table, and a refusal to run on
a schema newer than this code.

Why: a deployment upgrades replicas one by one and restores old backups; the schema a
database carries must be known, moved forward in order, and never silently misread.
Each backend lists its own steps (SQL dialects differ), numbered 1..N in order; a
database records every applied step in `schema_migrations`. A store opening a database
applies the steps it lacks, in one transaction each, and refuses with `SchemaTooNew`
when the database already carries a step this code does not know (a newer release
wrote it): reading it could misinterpret columns, and writing could corrupt it.

A database created before versioning carries the version-1 tables without the version
table; step 1 is written with `IF NOT EXISTS`, so it adopts such a database as is.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from engram.models.errors import EngramError


class SchemaTooNew(EngramError):
    """The database was migrated by a newer release than this code."""

    def __init__(self, found: int, known: int) -> None:
        super().__init__(
            f"database schema version {found} is newer than this release knows ({known});"
            " upgrade engram before opening this database"
        )
        self.found = found
        self.known = known


VERSION_TABLE = "schema_migrations"


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    statements: tuple[str, ...]


def pending(applied: int, steps: Sequence[Migration]) -> list[Migration]:
    """The steps still to apply to a database at version `applied` (ordered), or
    SchemaTooNew when the database is ahead of `steps`."""
    known = len(steps)
    if [m.version for m in steps] != list(range(1, known + 1)):
        raise ValueError("migration steps must be numbered 1..N in order")
    if applied > known:
        raise SchemaTooNew(applied, known)
    return list(steps[applied:])
