"""`engram serve`: the MCP endpoint over streamable HTTP or stdio, with the data
directory's lock and operator socket held for as long as it runs."""

from __future__ import annotations

import contextlib
import gc
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any

import typer

from engram.models.device import Device
from engram.service.settings import LogFormat, LogLevel, field_help

from .apps import app
from .common import ConfigOption, DatabaseUrl, KeyDir, command_settings, echo_error, open_engine


@app.command()
def serve(
    config: ConfigOption = None,
    host: Annotated[str | None, typer.Option(help=field_help("host"), show_default=False)] = None,
    port: Annotated[int | None, typer.Option(help=field_help("port"), show_default=False)] = None,
    data_dir: Annotated[
        Path | None, typer.Option("--data-dir", "-d", help=field_help("data_dir"), show_default=False)
    ] = None,
    stdio: Annotated[
        bool,
        typer.Option(
            "--stdio",
            help="Serve MCP over stdin/stdout for one scope bound at launch by ENGRAM_CONTEXT "
            "(a JWT signed with the host secret) or ENGRAM_CONTEXT_FILE (a JSON claims file).",
        ),
    ] = False,
    load_model: Annotated[
        bool | None, typer.Option("--model/--no-model", help=field_help("load_model"), show_default=False)
    ] = None,
    device: Annotated[
        Device | None, typer.Option(help=field_help("device"), show_default=False, case_sensitive=False)
    ] = None,
    rate: Annotated[float | None, typer.Option(help=field_help("rate"), show_default=False)] = None,
    burst: Annotated[int | None, typer.Option(help=field_help("burst"), show_default=False)] = None,
    deadline_ms: Annotated[int | None, typer.Option(help=field_help("deadline_ms"), show_default=False)] = None,
    approval_ttl_s: Annotated[int | None, typer.Option(help=field_help("approval_ttl_s"), show_default=False)] = None,
    allowed_host: Annotated[
        list[str] | None, typer.Option(help=field_help("allowed_hosts") + " Repeatable.", show_default=False)
    ] = None,
    log_level: Annotated[
        LogLevel | None, typer.Option(help=field_help("log_level"), show_default=False, case_sensitive=False)
    ] = None,
    log_format: Annotated[
        LogFormat | None, typer.Option(help=field_help("log_format"), show_default=False, case_sensitive=False)
    ] = None,
    database_url: DatabaseUrl = None,
    database_timeout_ms: Annotated[
        int | None, typer.Option(help=field_help("database_timeout_ms"), show_default=False)
    ] = None,
    key_dir: KeyDir = None,
    group: Annotated[str | None, typer.Option(help=field_help("group"), show_default=False)] = None,
    advertise_url: Annotated[str | None, typer.Option(help=field_help("advertise_url"), show_default=False)] = None,
    seed_vectors: Annotated[Path | None, typer.Option(help=field_help("seed_vectors"), show_default=False)] = None,
    workers: Annotated[int | None, typer.Option(help=field_help("workers"), show_default=False)] = None,
) -> None:
    """Serve the six memory tools over MCP (streamable HTTP at /mcp, or --stdio).

    Every HTTP call must carry the host's signed context in the X-Engram-Context header (see
    service/mcp/host_context.py). /healthz, /readyz and /metrics serve probes; /docs documents them. Every
    option also comes from ENGRAM_<OPTION> or the --config file.
    """
    settings = command_settings(
        config,
        host=host,
        port=port,
        data_dir=data_dir,
        load_model=load_model,
        device=device,
        rate=rate,
        burst=burst,
        deadline_ms=deadline_ms,
        approval_ttl_s=approval_ttl_s,
        allowed_hosts=allowed_host or None,
        log_level=log_level,
        log_format=log_format,
        database_url=database_url,
        database_timeout_ms=database_timeout_ms,
        key_dir=key_dir,
        group=group,
        advertise_url=advertise_url,
        seed_vectors=seed_vectors,
        workers=workers,
    )
    from engram.service.logs import configure_logging

    configure_logging(settings.log_level, settings.log_format)
    _refuse_unservable(settings)
    settings.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    if stdio and settings.workers > 1:
        echo_error("engram: --workers serves HTTP; --stdio is one process for one host")
        raise typer.Exit(2)
    if stdio:
        _serve_stdio(settings)
    elif settings.workers > 1:
        from .workers import Supervisor

        with _holding_data_dir(settings.data_dir):
            status = Supervisor(settings, _host_secret(settings.data_dir), settings.workers).run()
        if status:
            raise typer.Exit(status)
    else:
        serve_http(settings, _host_secret(settings.data_dir))


def _refuse_unservable(settings: Any) -> None:
    """Exit 2 on settings no server can run with: replica groups or several workers
    without a shared store, or a seed directory `engram admin export-vectors` did not write."""
    from engram.service.engine import SEED_HEADER
    from engram.service.store.base import DEFAULT_GROUP

    if settings.group != DEFAULT_GROUP and not settings.database_url:
        echo_error("engram: --group needs a shared store (--database-url): an embedded store is one process, no groups")
        raise typer.Exit(2)
    if settings.workers > 1 and not settings.database_url:
        echo_error(
            "engram: --workers needs a shared store (--database-url): an embedded store is one process; "
            "several workers are several replicas of one database"
        )
        raise typer.Exit(2)
    if settings.seed_vectors is not None and not (settings.seed_vectors / SEED_HEADER).is_file():
        echo_error(f"engram: {settings.seed_vectors} is not a seed written by `engram admin export-vectors`")
        raise typer.Exit(2)


def _serve_stdio(settings: Any) -> None:
    """One scope, bound at launch from the environment, over stdin/stdout; the engine
    warms up before the first message is read."""
    from engram.models.errors import ContextUnavailable
    from engram.service.mcp.host_context import binding_from_env, load_host_secret
    from engram.service.mcp.stdio import serve_stdio

    data_dir = settings.data_dir
    try:
        secret: bytes | None = load_host_secret(data_dir)
    except RuntimeError:
        secret = None
    try:
        binding = binding_from_env(os.environ, secret)
    except ContextUnavailable as exc:
        echo_error(f"engram: no trusted context for stdio ({exc.reason})")
        raise typer.Exit(2) from None
    with _holding_data_dir(data_dir):
        engine = open_engine(settings, seed_vectors=settings.seed_vectors)
        _collect_less_once_ready(engine)
        _warn_tenants_not_opted_in(engine)
        try:
            with _operator_channel(engine, data_dir):
                serve_stdio(engine, binding, settings)
        finally:
            engine.close()


def serve_http(settings: Any, secret: bytes, *, on_listening: Callable[[], None] | None = None) -> None:
    """Streamable HTTP under uvicorn. Alone, the engine warms up in the background and
    /readyz answers 503 until it is ready. As one of `--workers` (``on_listening``
    given), the process listens on the shared address (SO_REUSEPORT) only once its
    engine is ready, then calls ``on_listening``."""
    import uvicorn

    from engram.service.mcp.app import create_app

    if settings.host not in ("127.0.0.1", "localhost", "::1") and not settings.allowed_hosts:
        echo_error("engram: warning: non-loopback host without --allowed-host: DNS-rebinding protection is off")
    with _holding_data_dir(settings.data_dir):
        engine = open_engine(settings, background=True, serve_replica=True, seed_vectors=settings.seed_vectors)
        _collect_less_once_ready(engine)
        _warn_tenants_not_opted_in(engine)
        application = create_app(engine, settings, host_secret=secret, close_engine=True)
        # log_config=None: uvicorn's loggers propagate to the handler configured above.
        logs = {"log_config": None, "log_level": settings.log_level.value}
        with _operator_channel(engine, settings.data_dir):
            if on_listening is None:
                uvicorn.run(application, host=settings.host, port=settings.port, **logs)
                return
            from .workers import listening_socket

            engine.wait_ready()
            sock = listening_socket(settings.host, settings.port)
            on_listening()
            uvicorn.Server(uvicorn.Config(application, **logs)).run(sockets=[sock])


def _host_secret(data_dir: Path) -> bytes:
    """The secret hosts sign contexts with: ENGRAM_HOST_SECRET, or the data directory's
    file, created on a fresh directory's first start (like the KEK)."""
    from engram.service.mcp.host_context import create_host_secret, load_host_secret

    if "ENGRAM_HOST_SECRET" not in os.environ:
        path, created = create_host_secret(data_dir)
        if created:
            echo_error(f"engram: created host secret {path} (mode 0600); hosts sign contexts with it")
    try:
        return load_host_secret(data_dir)
    except RuntimeError as exc:
        echo_error(f"engram: {exc}")
        raise typer.Exit(2) from None


def _collect_less_once_ready(engine: Any) -> None:
    """Once the engine is warm, put what is loaded by then (modules, the model, the
    index maps: the process's long-lived objects) out of the cyclic collector's reach: a
    full collection then walks only what calls made since. Walking everything paused
    every thread of the server for 50 to 100 ms at a time (eval/RESULTS.md)."""

    def freeze() -> None:
        if engine.wait_ready():
            gc.freeze()

    threading.Thread(target=freeze, name="engram-gc-freeze", daemon=True).start()


def _warn_tenants_not_opted_in(engine: Any) -> None:
    """Name, at start, each tenant whose memory is there but whose calls will be refused
    (bulk ingest and `engram bench` write scopes; opting in is a separate operator step)."""
    for tenant in engine.tenants_not_opted_in():
        echo_error(
            f"engram: warning: tenant {tenant!r} holds memory but is not opted in: its calls are refused "
            f"(-32603, logged as 'tenant not enabled') until `engram admin tenant enable {tenant}`"
        )


@contextlib.contextmanager
def _holding_data_dir(data_dir: Path) -> Iterator[None]:
    """Hold the data directory for the life of a server; exit 2 if another process does."""
    from engram.service.operator.ownership import DataDirLock, DirectoryHeld

    try:
        lock = DataDirLock(data_dir).acquire()
    except DirectoryHeld:
        echo_error(f"engram: another engram process holds {data_dir}; one server per data directory")
        raise typer.Exit(2) from None
    try:
        yield
    finally:
        lock.release()


@contextlib.contextmanager
def _operator_channel(engine: Any, data_dir: Path) -> Iterator[None]:
    """The live server's operator socket (<data_dir>/operator.sock, owner-only). A data
    directory whose path is too long for a Unix socket serves without one (admin
    commands are then refused while the server runs), with a warning."""
    from engram.service.operator.channel import OperatorChannel

    try:
        channel = OperatorChannel(engine, data_dir).start()
    except ValueError as exc:
        echo_error(f"engram: warning: no operator channel ({exc}); stop the server to run admin commands")
        yield
        return
    try:
        yield
    finally:
        channel.close()
