"""The service's configuration: one typed object, built once, handed down.

Why one object: every serve option used to be a flag whose default was repeated in the
CLI, the HTTP app and the stdio server. Here each option is declared once, with its
default, bounds and help text; `load_settings` layers, highest first:

1. command-line flags (passed in as keyword overrides; `None` means "not given"),
2. the environment, ``ENGRAM_<FIELD>`` (e.g. ``ENGRAM_DATA_DIR``, ``ENGRAM_RATE``;
   lists as JSON, ``ENGRAM_ALLOWED_HOSTS='["memory.internal:8765"]'``),
3. a TOML config file (``--config FILE`` or ``ENGRAM_CONFIG``; top-level keys are the
   field names, an unknown key is an error),
4. the defaults below.

The CLI builds it and hands it to `create_app` / `serve_stdio` and the engine; other
rooms add a field here (with ``ENGRAM_*`` coming for free) instead of threading a new
parameter through every layer.
"""

from __future__ import annotations

import contextvars
import os
import typing
from enum import StrEnum
from pathlib import Path
from typing import Any

import platformdirs
from pydantic import Field
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from engram.models.device import Device
from engram.models.errors import EngramError
from engram.service.store.address import StoreAddress
from engram.service.store.base import DEFAULT_DATABASE_TIMEOUT_MS, DEFAULT_GROUP


class ConfigFileMissing(EngramError):
    """The named config file does not exist (a typo must not silently fall back)."""


ENV_PREFIX = "ENGRAM_"
CONFIG_ENV = "ENGRAM_CONFIG"

#: A field's default as the help and the reference say it, where the value is per user.
SHOWN_DEFAULT = "shown_default"
#: platformdirs' application name: ~/.local/share/engram, ~/.cache/engram on Linux.
APP_NAME = "engram"


def user_data_dir() -> Path:
    """The user's own data directory, the default of every command: ``~/.local/share/engram``
    on Linux (``$XDG_DATA_HOME/engram``), ``~/Library/Application Support/engram`` on macOS,
    ``%LOCALAPPDATA%\\engram`` on Windows. Outside any project, so a key never lands in a
    git work tree by default."""
    return Path(platformdirs.user_data_dir(APP_NAME, appauthor=False))


def user_cache_dir() -> Path:
    """The user's cache for files derived from the installation (the model's ONNX
    runtime files), shared by every data directory: ``~/.cache/engram`` on Linux."""
    return Path(platformdirs.user_cache_dir(APP_NAME, appauthor=False))


_config_file: contextvars.ContextVar[Path | None] = contextvars.ContextVar("engram_config_file", default=None)


class LogFormat(StrEnum):
    """How log lines are written to stderr."""

    TEXT = "text"
    JSON = "json"


class LogLevel(StrEnum):
    """Threshold of the service's own loggers (``engram.*``) and the HTTP server's."""

    DEBUG = "debug"
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"


class Settings(BaseSettings):
    """Every option of `engram serve` (and the data directory every command uses)."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        extra="forbid",
        frozen=True,
    )

    data_dir: Path = Field(
        default_factory=user_data_dir,
        description="Data directory (store, indexes, keys, host_secret, audit.jsonl).",
        json_schema_extra={SHOWN_DEFAULT: "the user's data directory: ~/.local/share/engram on Linux"},
    )
    model_cache_dir: Path = Field(
        default_factory=lambda: user_cache_dir() / "models",
        description="Where the model's runtime files (the ONNX export of the installed model, about 110 MB) "
        "are made once and shared by every data directory.",
        json_schema_extra={SHOWN_DEFAULT: "~/.cache/engram/models on Linux (the user's cache directory)"},
    )
    host: str = Field("127.0.0.1", description="Interface to listen on. Loopback keeps DNS-rebinding protection on.")
    port: int = Field(8765, ge=0, le=65535, description="TCP port.")
    load_model: bool = Field(True, description="Load the embedding model (semantic channel).")
    device: Device = Field(
        Device.AUTO,
        description="Where the model's torch backend (bulk embedding) runs: auto picks CUDA, then MPS, "
        "then the CPU; naming a device this machine lacks is an error. Queries are encoded by ONNX "
        "Runtime on the CPU either way.",
    )
    rate: float = Field(20.0, ge=0, description="Per-principal calls per second (0 disables the limit).")
    burst: int = Field(40, ge=1, description="Per-principal burst size.")
    deadline_ms: int = Field(
        30_000, ge=1, le=600_000, description="Per-call deadline when the context carries no deadline_ms."
    )
    approval_ttl_s: int = Field(
        300,
        ge=1,
        le=300,
        description="How long a human's approval asked through MCP elicitation (withdraw, forget) stays "
        "valid, counted from the question; the confirmation gate allows at most 300.",
    )
    allowed_hosts: list[str] = Field(
        default_factory=list,
        description="Host header values to accept (e.g. memory.internal:8765); turns DNS-rebinding "
        "protection on for a non-loopback host.",
    )
    database_url: str | None = Field(
        None,
        description="PostgreSQL store shared by several replicas (postgresql://user@host/db); "
        "none: SQLite in the data directory.",
    )
    database_timeout_ms: int = Field(
        DEFAULT_DATABASE_TIMEOUT_MS,
        ge=1_000,
        le=600_000,
        description="PostgreSQL store only: the longest one wait on the database may take (an answer, a "
        "connection, a pooled connection) before the call answers STORE_UNAVAILABLE (MUTATION_OUTCOME_UNKNOWN "
        "at a commit) and the connection is closed. Also sets TCP keepalives and tcp_user_timeout, and the "
        "server's idle_in_transaction_session_timeout (twice this) for this replica's sessions.",
    )
    key_dir: Path | None = Field(
        None,
        description="Directory of the key-encryption key files (none: <data-dir>/keys). Every replica "
        "of one database must use the same key files.",
    )
    group: str = Field(
        DEFAULT_GROUP,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$",
        description="Replica group of this replica (shared store only): it projects and serves the scopes "
        "routed to its group and forwards other scopes' calls to a live replica of theirs.",
    )
    advertise_url: str | None = Field(
        None,
        pattern=r"^https?://[^/\s]+$",
        description="Base URL (scheme://host:port) where peer replicas forward calls to this replica "
        "(none: http://HOST:PORT, the machine's host name when HOST is a wildcard address).",
    )
    seed_vectors: Path | None = Field(
        None,
        description="Directory written by `engram admin export-vectors` on a live replica: a new replica "
        "takes each current record's vectors from it when its passage texts match, and embeds only the rest.",
    )
    workers: int = Field(
        1,
        ge=1,
        le=256,
        description="Serving processes behind the one port (shared store only): each a replica with its own "
        "projections under <data-dir>/workers/<i>, so memory grows with their number.",
    )
    client_idle_s: int = Field(
        300,
        ge=0,
        le=86_400,
        description="A server holding the data directory for stdio clients (the first `engram serve --stdio` "
        "once its own client has left, or the background server started for them) exits once no client has "
        "been connected for this many seconds.",
    )
    console_port: int | None = Field(
        None,
        ge=0,
        le=65535,
        description="TCP port of the operator console, a second listener of `engram serve` (none: no console). "
        "Log in with a link from `engram admin console-link`.",
    )
    console_host: str = Field(
        "127.0.0.1",
        description="Interface the console listens on. Any other than loopback needs --console-tls-cert, "
        "--console-tls-key and --console-remote, or serve refuses to start.",
    )
    console_remote: bool = Field(False, description="Allow the console on a non-loopback interface (with TLS only).")
    console_tls_cert: Path | None = Field(None, description="PEM certificate the console serves HTTPS with.")
    console_tls_key: Path | None = Field(None, description="PEM private key of --console-tls-cert.")
    console_link_ttl_s: int = Field(
        300, ge=10, le=3600, description="Seconds a console login link stays valid (it works once)."
    )
    console_session_s: int = Field(
        8 * 3600, ge=60, le=7 * 24 * 3600, description="Seconds a console session lasts after its login."
    )
    console_reports: list[Path] = Field(
        default_factory=list,
        description="Directories of `engram eval` / `engram bench` output the console plots (searched for "
        "bench.json and metrics files).",
    )
    inline_purge_records: int = Field(
        250,
        ge=0,
        description="A forget in a scope of at most this many live records rewrites the scope's index files "
        "before it answers (projection_invalidation complete); in a larger scope it answers once the record "
        "is out of every search (pending), and the background purge rewrites them.",
    )
    purge_delay_s: float = Field(
        5.0,
        ge=0,
        le=300,
        description="How long the background purge waits after a forget answered pending, so that forgets "
        "within that time share one rewrite: a forgotten record's bytes leave this replica's files within "
        "this delay plus one rewrite of its scope.",
    )
    log_level: LogLevel = Field(LogLevel.INFO, description="Log threshold of engram.* and the HTTP server.")
    log_format: LogFormat = Field(LogFormat.TEXT, description="Log lines as text or as one JSON object each.")

    def store_address(self) -> StoreAddress:
        """The store these settings name: the database at ``database_url`` (waits bound
        by ``database_timeout_ms``), else the data directory's SQLite file."""
        return StoreAddress.resolve(self.data_dir, self.database_url, self.database_timeout_ms)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        config_file = _config_file.get()
        if config_file is not None:
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=config_file))
        return tuple(sources)


def load_settings(config: Path | None = None, **overrides: Any) -> Settings:
    """Flags over environment over config file over defaults; `None` overrides are unset.

    `config` (else ``ENGRAM_CONFIG``) names the TOML file. Raises `ConfigFileMissing`
    for a named file that is not there and pydantic's `ValidationError` for bad values.
    """
    if config is None and os.environ.get(CONFIG_ENV):
        config = Path(os.environ[CONFIG_ENV])
    if config is not None and not Path(config).is_file():
        raise ConfigFileMissing(str(config))
    token = _config_file.set(None if config is None else Path(config))
    try:
        return Settings(**{name: value for name, value in overrides.items() if value is not None})
    finally:
        _config_file.reset(token)


def advertised_url(settings: Settings) -> str:
    """Where peers reach this replica: `advertise_url`, else derived from host and port."""
    if settings.advertise_url:
        return settings.advertise_url
    import socket

    host = settings.host
    if host in ("0.0.0.0", "::", ""):
        host = socket.gethostname()
    elif ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{settings.port}"


def _default_text(name: str) -> str:
    """A field's default as help and the reference show it (``none`` for no value)."""
    field = Settings.model_fields[name]
    if isinstance(field.json_schema_extra, dict) and SHOWN_DEFAULT in field.json_schema_extra:
        return str(field.json_schema_extra[SHOWN_DEFAULT])  # a per-user path, not this machine's
    default = field.get_default(call_default_factory=True)
    if isinstance(default, StrEnum):
        default = default.value
    elif isinstance(default, Path) and not default.is_absolute():
        default = f"./{default}"
    return "none" if default in ([], None) else str(default)


def field_help(name: str) -> str:
    """A CLI option's help: the field's description, its default and its variable."""
    return f"{Settings.model_fields[name].description} (default {_default_text(name)}; env {ENV_PREFIX}{name.upper()})"


def _type_name(annotation: Any) -> str:
    """A field's type as the reference shows it: an enum as its values, `X | None` as optional."""
    args = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
    if len(args) == 1 and type(None) in typing.get_args(annotation):
        return f"{_type_name(args[0])} (optional)"
    if isinstance(annotation, type) and issubclass(annotation, StrEnum):
        return ", ".join(f"`{member.value}`" for member in annotation)
    return f"`{annotation.__name__ if isinstance(annotation, type) else annotation}`"


def _bounds(name: str) -> str:
    """The field's numeric bounds (`ge`, `le`), as a suffix of its type."""
    limits = [
        f"{sign} {getattr(item, kind)}"
        for item in Settings.model_fields[name].metadata
        for kind, sign in (("ge", "≥"), ("le", "≤"))
        if getattr(item, kind, None) is not None
    ]
    return f" ({', '.join(limits)})" if limits else ""


def reference_table() -> str:
    """The configuration reference (markdown) of docs/reference/configuration.md.

    One row per `Settings` field: its name, its ``ENGRAM_*`` variable, type, default and
    description, generated from the declarations above so the page cannot drift from them.
    """
    rows = ["| field | environment | type | default | description |", "|---|---|---|---|---|"]
    for name, info in Settings.model_fields.items():
        default = _default_text(name)
        shown = default if default == "none" else f"`{default}`"
        description = (info.description or "").replace("<", "&lt;").replace(">", "&gt;").replace("|", "&#124;")
        rows.append(
            f"| `{name}` | `{ENV_PREFIX}{name.upper()}` | {_type_name(info.annotation)}{_bounds(name)} "
            f"| {shown} | {description} |"
        )
    return "\n".join(rows)
