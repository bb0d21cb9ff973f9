"""One store address: the data directory's SQLite file or a shared database's URL,
resolved once from the settings, opened by its scheme's backend, never shown with
its password."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
from typer.testing import CliRunner

from engram.service.cli import app
from engram.service.settings import Settings
from engram.service.store import SqliteStore, StoreAddress, UnknownStoreScheme, open_store

SECRET_URL = "postgresql://engram:s3cret@db.invalid:5433/engram"


def test_settings_without_a_database_url_name_the_data_directorys_file(tmp_path: Path) -> None:
    address = Settings(data_dir=tmp_path / "data dir").store_address()
    assert address.scheme == "sqlite"
    assert address.sqlite_path == (tmp_path / "data dir" / "engram.db").absolute()
    assert address.shared_url is None
    (tmp_path / "data dir").mkdir()
    store = open_store(address)
    try:
        assert isinstance(store, SqliteStore)
        assert store.schema_version() > 0
    finally:
        store.close()
    assert address.sqlite_path.is_file()


def test_a_database_url_is_the_whole_address_with_its_timeout(tmp_path: Path) -> None:
    address = Settings(data_dir=tmp_path, database_url=SECRET_URL, database_timeout_ms=2_500).store_address()
    assert address == StoreAddress(SECRET_URL, 2_500)
    assert address.shared_url == SECRET_URL
    assert address.sqlite_path is None
    assert pickle.loads(pickle.dumps(address)) == address  # crosses to a bulk-load worker


def test_a_libpq_connection_string_names_postgresql() -> None:
    assert StoreAddress("host=127.0.0.1 port=5432 dbname=engram").scheme == "postgresql"


def test_the_password_is_neither_in_the_label_nor_in_the_repr() -> None:
    address = StoreAddress(SECRET_URL)
    assert address.label() == "postgresql://engram@db.invalid:5433/engram"
    assert "s3cret" not in repr(address)


def test_a_connection_strings_password_is_not_in_its_label() -> None:
    label = StoreAddress("host=db.invalid dbname=engram user=engram password=s3cret").label()
    assert "s3cret" not in label and "password" not in label
    assert "host=db.invalid" in label and "dbname=engram" in label


def test_a_scheme_no_backend_opens_is_refused_before_anything_opens(tmp_path: Path) -> None:
    with pytest.raises(UnknownStoreScheme) as refused:
        open_store(StoreAddress("mysql://engram:s3cret@db.invalid/engram"))
    assert "mysql://" in str(refused.value) and "s3cret" not in str(refused.value)


def test_the_cli_refuses_an_unknown_database_scheme_with_exit_2(tmp_path: Path) -> None:
    out = CliRunner().invoke(
        app,
        ["admin", "--database-url", "mysql://engram:s3cret@db.invalid/engram", "tenant", "enable", "acme"]
        + ["-d", str(tmp_path)],
    )
    assert out.exit_code == 2, out.output
    assert "no store backend opens mysql://" in out.output
    assert "s3cret" not in out.output
    assert not (tmp_path / "engram.db").exists()
