"""Where the store is: one address, resolved once from the settings and handed down
whole to everything that opens the store (the engine, a bulk-load worker, the
operator channel's check that a request names the store the server serves).

An address is a URL and the longest wait on it: ``sqlite:///path/engram.db`` (the
data directory's own file, the default) or the ``postgresql://`` database several
replicas share. The scheme picks the backend from :data:`BACKENDS`; a backend's
module is imported only when its scheme is opened (psycopg only for PostgreSQL).
The URL may hold a password: the address's ``repr`` leaves the URL out, and
:meth:`StoreAddress.label` is how it is shown.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote, unquote, urlsplit

from engram.models.errors import EngramError

from .base import DEFAULT_DATABASE_TIMEOUT_MS

if TYPE_CHECKING:
    from .base import Store

#: The embedded store's scheme: one process, one file.
SQLITE_SCHEME = "sqlite"
#: What a database URL without a scheme (a libpq ``host=... dbname=...`` string) names.
CONNINFO_SCHEME = "postgresql"
#: The embedded store's file in a data directory.
DB_FILE = "engram.db"


@dataclass(frozen=True)
class StoreAddress:
    """A store's URL and the longest one wait on it may take (``timeout_ms``: the
    shared database's bound; SQLite has its own busy timeout)."""

    url: str = field(repr=False)
    timeout_ms: int = DEFAULT_DATABASE_TIMEOUT_MS

    @classmethod
    def sqlite(cls, path: Path) -> StoreAddress:
        """The SQLite file at ``path``."""
        return cls(f"{SQLITE_SCHEME}://{quote(str(Path(path).absolute()))}")

    @classmethod
    def resolve(
        cls, data_dir: Path, database_url: str | None = None, timeout_ms: int = DEFAULT_DATABASE_TIMEOUT_MS
    ) -> StoreAddress:
        """The shared database at ``database_url`` when one is given, else the data
        directory's own SQLite file."""
        return cls(database_url, timeout_ms) if database_url else cls.sqlite(Path(data_dir) / DB_FILE)

    @property
    def scheme(self) -> str:
        """The URL's scheme; a libpq ``key=value`` connection string has none, and names
        a PostgreSQL database."""
        return urlsplit(self.url).scheme or CONNINFO_SCHEME

    @property
    def shared_url(self) -> str | None:
        """The database URL when several replicas may share this store, else None: what
        an operator request names so that a server on another store refuses it."""
        return None if self.scheme == SQLITE_SCHEME else self.url

    @property
    def sqlite_path(self) -> Path | None:
        """The SQLite file, for an embedded store."""
        return Path(unquote(urlsplit(self.url).path)) if self.scheme == SQLITE_SCHEME else None

    def label(self) -> str:
        """The store as an operator reads it: the SQLite file, or the database URL (or
        libpq connection string) without its password."""
        if self.sqlite_path is not None:
            return f"the SQLite store {self.sqlite_path}"
        if not urlsplit(self.url).scheme:
            from psycopg.conninfo import conninfo_to_dict, make_conninfo

            return make_conninfo("", **{k: v for k, v in conninfo_to_dict(self.url).items() if k != "password"})
        parts = urlsplit(self.url)
        if parts.password is None:
            return self.url
        host = parts.hostname or ""
        netloc = f"{parts.username}@{host}" + (f":{parts.port}" if parts.port else "")
        return parts._replace(netloc=netloc).geturl()


class UnknownStoreScheme(EngramError, ValueError):
    """A store URL whose scheme no backend opens."""


def _open_sqlite(address: StoreAddress) -> Store:
    from .sqlite import SqliteStore

    assert address.sqlite_path is not None
    return SqliteStore(address.sqlite_path)


def _open_postgres(address: StoreAddress) -> Store:
    from .postgres import PostgresStore

    return PostgresStore(address.url, timeout_ms=address.timeout_ms)


#: Scheme -> the function opening a store at an address of that scheme.
BACKENDS: dict[str, Callable[[StoreAddress], Store]] = {
    SQLITE_SCHEME: _open_sqlite,
    "postgresql": _open_postgres,
    "postgres": _open_postgres,
}


def open_store(address: StoreAddress) -> Store:
    """The store at ``address``, opened by its scheme's backend."""
    opener = BACKENDS.get(address.scheme)
    if opener is None:
        known = ", ".join(f"{scheme}://" for scheme in BACKENDS)
        raise UnknownStoreScheme(f"no store backend opens {address.scheme}:// (known: {known})")
    return opener(address)
