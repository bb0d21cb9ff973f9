"""What every `engram` command shares: the store options, the settings a command runs
with, and the engine it opens (directly, or through a live server's operator socket).

The names without a leading underscore are the command modules' shared surface: the
commands here and the plugins of other rooms (`index_data`, `eval`) use them."""

from __future__ import annotations

import contextlib
import contextvars
import json
from collections.abc import Iterator
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer

from engram.service.settings import field_help
from engram.service.store import StoreAddress

from .apps import admin

DataDir = Annotated[
    Path | None,
    typer.Option("--data-dir", "-d", help=field_help("data_dir"), show_default=False),
]
DatabaseUrl = Annotated[str | None, typer.Option("--database-url", help=field_help("database_url"), show_default=False)]
KeyDir = Annotated[Path | None, typer.Option("--key-dir", help=field_help("key_dir"), show_default=False)]


@dataclass(frozen=True)
class StoreChoice:
    """The admin group's --database-url/--key-dir flags (None: not given, so the
    environment, the config file or the default decides)."""

    database_url: str | None = None
    key_dir: Path | None = None


#: The admin group's --database-url/--key-dir for the command being run (set by its
#: callback before the command; one command per process).
_store_choice: contextvars.ContextVar[StoreChoice] = contextvars.ContextVar("engram_store_choice")


@admin.callback()
def _admin_store(database_url: DatabaseUrl = None, key_dir: KeyDir = None) -> None:
    """Operator commands (never reachable from the agent path)."""
    _store_choice.set(StoreChoice(database_url, key_dir))


def store_choice() -> StoreChoice:
    """The admin group's --database-url/--key-dir for the command being run."""
    return _store_choice.get(StoreChoice())


def echo_error(message: str) -> None:
    typer.echo(message, err=True)


def contract_failure(exc: Any) -> str:
    """A ContractError as the operator reads it: its code, and what to fix when the
    engine said (its detail), else the contract's fixed message."""
    return f"engram: {exc.code.value}: {exc.detail or exc.message}"


@contextlib.contextmanager
def long_step(message: str) -> Iterator[None]:
    """A step that takes a while, said on stderr: a spinner on a terminal, a line
    otherwise; then how long it took."""
    import sys
    import time

    started = time.monotonic()
    if sys.stderr.isatty():
        from rich.console import Console

        with Console(stderr=True).status(f"{message}..."):
            yield
    else:
        echo_error(f"engram: {message}...")
        yield
    echo_error(f"engram: {message}: done in {time.monotonic() - started:.1f} s")


def open_engine(
    settings: Any, *, serving: bool = False, serve_replica: bool = False, seed_vectors: Path | None = None
) -> Any:
    """The engine the settings describe (data directory, store, keys, model, replica
    group); a database this release cannot read exits 2 with the reason. ``serving``: a
    server's open, warmed up in a thread and ready for agents' first calls."""
    from engram.ranking import DeviceUnavailable
    from engram.service.engine import Engine, PurgeSchedule
    from engram.service.settings import advertised_url
    from engram.service.store import SchemaTooNew, UnknownStoreScheme

    try:
        return Engine.open(
            settings.data_dir,
            load_model=settings.load_model,
            background=serving,
            warm_calls=serving,
            store=settings.store_address(),
            key_dir=settings.key_dir,
            device=settings.device,
            serve_replica=serve_replica,
            group=settings.group,
            advertise_url=advertised_url(settings) if serve_replica else None,
            seed_vectors=seed_vectors,
            model_cache=settings.model_cache_dir,
            purge=PurgeSchedule(settings.inline_purge_records, settings.purge_delay_s),
        )
    except (SchemaTooNew, DeviceUnavailable, UnknownStoreScheme) as exc:
        echo_error(f"engram: {exc}")
        raise typer.Exit(2) from None


@contextlib.contextmanager
def operator_engine(data_dir: Path | None, *, load_model: bool = False) -> Iterator[Any]:
    """An engine for one operator command, closed afterwards; contract errors exit 1."""
    from engram.models.codes import ContractError

    engine = None
    try:
        choice = store_choice()
        engine = open_engine(
            command_settings(
                data_dir=data_dir, load_model=load_model, database_url=choice.database_url, key_dir=choice.key_dir
            )
        )
        yield engine
    except ContractError as exc:
        echo_error(contract_failure(exc))
        raise typer.Exit(1) from None
    finally:
        if engine is not None:
            engine.close()


def print_json(value: Any) -> None:
    typer.echo(json.dumps(value, indent=2, sort_keys=True, default=str))


class DataDirUse(Enum):
    """What a command does with its data directory: the commands documented to create
    one (`engram serve`, `engram ingest`, `engram admin host-secret`, `engram admin
    context init`; `engram admin restore` makes its own) say so when they do; every
    other command refuses one that does not exist, rather than guess that a mistyped
    path is a new, empty store. UNUSED: the command reads no data directory."""

    EXISTING = "existing"
    CREATES = "creates"
    UNUSED = "unused"


def command_settings(config: Path | None = None, *, use: DataDirUse = DataDirUse.EXISTING, **flags: Any) -> Any:
    """The `Settings` for this command: flags over ENGRAM_* over the config file. Bad
    values exit 2 with pydantic's explanation; so does a data directory that does not
    exist (unless the command creates one: it then says so), and a database URL named
    beside a data directory that holds an SQLite store (which of the two is meant?)."""
    from pydantic import ValidationError

    from engram.service.settings import ConfigFileMissing, load_settings

    try:
        settings = load_settings(config, **flags)
    except ConfigFileMissing as exc:
        echo_error(f"engram: config file {exc} not found")
        raise typer.Exit(2) from None
    except ValidationError as exc:
        echo_error(f"engram: bad configuration: {exc}")
        raise typer.Exit(2) from None
    directory: Path = settings.data_dir
    if use is DataDirUse.UNUSED:
        return settings
    if not directory.is_dir():
        if use is DataDirUse.EXISTING:
            echo_error(
                f"engram: data directory {directory} does not exist; give --data-dir (or ENGRAM_DATA_DIR) "
                "of an existing one (`engram serve` and `engram ingest` create a new one)"
            )
            raise typer.Exit(2)
        echo_error(f"engram: creating data directory {directory}")
    _refuse_two_stores(settings.store_address(), directory)
    return settings


def _refuse_two_stores(named: StoreAddress, directory: Path) -> None:
    own = StoreAddress.resolve(directory)
    if named.shared_url is not None and own.sqlite_path is not None and own.sqlite_path.exists():
        _ambiguous_store(named, f"{directory} holds {own.label()}")


def _ambiguous_store(named: StoreAddress, other: str) -> NoReturn:
    echo_error(
        f"engram: ambiguous store: --database-url (or ENGRAM_DATABASE_URL) names {named.label()}, "
        f"but {other}; give the --data-dir of a replica of that database, or unset the database URL "
        "to act on the data directory's own store"
    )
    raise typer.Exit(2)


ConfigOption = Annotated[
    Path | None,
    typer.Option(
        "--config",
        envvar="ENGRAM_CONFIG",
        help="TOML file of settings (keys: the option names "
        "with underscores, e.g. data_dir, rate, log_format); flags and ENGRAM_* override it.",
    ),
]


ModelOption = Annotated[
    bool,
    typer.Option(
        "--model/--no-model",
        help="Load the embedding model (needed to rebuild the vector "
        "index; ignored when a live server runs the command with its own model).",
    ),
]


def run_operator_command(data_dir: Path | None, command: str, args: dict[str, Any], *, load_model: bool = False) -> Any:
    """Run an operator command where it is safe: through the live server that owns the
    data directory (its operator socket), or, when no server runs, on an engine opened
    here while holding the directory's lock. Never as a second engine beside a server."""
    from engram.service.operator.channel import STORE_MISMATCH, ChannelAbsent, OperatorFailure, call
    from engram.service.operator.commands import run
    from engram.service.operator.ownership import DataDirLock, DirectoryHeld

    choice = store_choice()
    settings = command_settings(data_dir=data_dir, database_url=choice.database_url, key_dir=choice.key_dir)
    directory = settings.data_dir
    named = settings.store_address()
    try:
        return call(directory, command, args, store=named.shared_url)
    except ChannelAbsent:
        pass
    except OperatorFailure as exc:
        if exc.code == STORE_MISMATCH:
            _ambiguous_store(named, f"the server holding {directory} serves {exc.message}")
        echo_error(f"engram: {exc.code}: {exc.message}")
        raise typer.Exit(1) from None
    try:
        with DataDirLock(directory), operator_engine(directory, load_model=load_model) as engine:
            return run(engine, command, args)
    except DirectoryHeld:
        echo_error(
            f"engram: another engram process holds {directory} and its operator channel does not answer "
            "(a server still starting, or another admin command); retry shortly, or stop it first"
        )
        raise typer.Exit(1) from None
