"""The PostgreSQL backend: the store several `engram serve` replicas share, a package of
its concepts: the bounded connection pool (`connection`), the schema and its migrations
(`schema`), one transaction's statements (`transaction`), the store's reads and what a
shared store adds (`store`), journal wake-ups (`notifications`) and the shared
deployment's tables (`deployment`). psycopg is imported only when a PostgreSQL store is
opened (`service.store.address`)."""

from __future__ import annotations

from .connection import MANY_ROWS
from .deployment import PostgresDeployment
from .schema import POSTGRES_MIGRATIONS
from .store import PostgresStore

__all__ = ["MANY_ROWS", "POSTGRES_MIGRATIONS", "PostgresDeployment", "PostgresStore"]
