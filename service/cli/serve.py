"""`engram serve`: the MCP endpoint over streamable HTTP or stdio, with the data
directory's lock and operator socket held for as long as it runs."""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any

import typer

from engram.models.device import Device
from engram.service.settings import LogFormat, LogLevel, field_help

from .apps import app
from .common import ConfigOption, DatabaseUrl, DataDirUse, KeyDir, command_settings, echo_error, open_engine

logger = logging.getLogger("engram.serve")


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
            "(a JWT signed with the host secret) or ENGRAM_CONTEXT_FILE (a JSON claims file). On a data "
            "directory another engram serve holds, bridge to it over <data-dir>/mcp.sock instead.",
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
    client_idle_s: Annotated[int | None, typer.Option(help=field_help("client_idle_s"), show_default=False)] = None,
    background: Annotated[
        bool,
        typer.Option(
            "--background",
            help="Hold the data directory for stdio clients only, until none has been connected for "
            "--client-idle-s (what `serve --stdio` starts when the server it bridged to has gone).",
        ),
    ] = False,
    console_port: Annotated[int | None, typer.Option(help=field_help("console_port"), show_default=False)] = None,
    console_host: Annotated[str | None, typer.Option(help=field_help("console_host"), show_default=False)] = None,
    console_remote: Annotated[
        bool | None, typer.Option("--console-remote", help=field_help("console_remote"), show_default=False)
    ] = None,
    console_tls_cert: Annotated[
        Path | None, typer.Option(help=field_help("console_tls_cert"), show_default=False)
    ] = None,
    console_tls_key: Annotated[
        Path | None, typer.Option(help=field_help("console_tls_key"), show_default=False)
    ] = None,
    console_reports: Annotated[
        list[Path] | None, typer.Option(help=field_help("console_reports") + " Repeatable.", show_default=False)
    ] = None,
) -> None:
    """Serve the six memory tools over MCP (streamable HTTP at /mcp, or --stdio).

    Every HTTP call must carry the host's signed context in the X-Engram-Context header (see
    service/mcp/host_context.py). /healthz, /readyz and /metrics serve probes; /docs documents them. Every
    option also comes from ENGRAM_<OPTION> or the --config file. The data directory is created (and said so)
    when it does not exist; the warm-up logs its steps until ready.
    """
    settings = command_settings(
        config,
        use=DataDirUse.CREATES,
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
        client_idle_s=client_idle_s,
        console_port=console_port,
        console_host=console_host,
        console_remote=console_remote,
        console_tls_cert=console_tls_cert,
        console_tls_key=console_tls_key,
        console_reports=console_reports or None,
    )
    from engram.service.logs import configure_logging

    configure_logging(settings.log_level, settings.log_format)
    if (reason := _unservable(settings, stdio=stdio)) is not None:
        echo_error(f"engram: {reason}")
        raise typer.Exit(2)
    from engram.service.engine import claim_data_dir

    claim_data_dir(settings.data_dir)
    if background:
        _serve_background(settings)
    elif stdio:
        _serve_stdio(settings)
    elif settings.workers > 1:
        from .workers import Supervisor

        with _holding_data_dir(settings.data_dir):
            status = Supervisor(settings, _host_secret(settings.data_dir), settings.workers).run()
        if status:
            raise typer.Exit(status)
    else:
        serve_http(settings, _host_secret(settings.data_dir))


def _unservable(settings: Any, *, stdio: bool) -> str | None:
    """Why no server can run with these settings (the first reason), or None: replica
    groups or several workers without a shared store, a console the listener refuses, a
    seed directory `engram admin export-vectors` did not write, or a console or several
    workers with --stdio."""
    from engram.service.console.listener import refusal
    from engram.service.engine import SEED_HEADER
    from engram.service.store.base import DEFAULT_GROUP

    shared = bool(settings.database_url)
    seed = settings.seed_vectors
    console = refusal(settings)
    reasons = (
        (
            settings.group != DEFAULT_GROUP and not shared,
            "--group needs a shared store (--database-url): an embedded store is one process, no groups",
        ),
        (
            settings.workers > 1 and not shared,
            "--workers needs a shared store (--database-url): an embedded store is one process; "
            "several workers are several replicas of one database",
        ),
        (console is not None, f"console refused: {console}"),
        (
            seed is not None and not (seed / SEED_HEADER).is_file(),
            f"{seed} is not a seed written by `engram admin export-vectors`",
        ),
        (stdio and settings.console_port is not None, "the console is served beside HTTP; --stdio serves no console"),
        (stdio and settings.workers > 1, "--workers serves HTTP; --stdio is one process for one host"),
    )
    return next((reason for refused, reason in reasons if refused), None)


def _serve_stdio(settings: Any) -> None:
    """One client, bound at launch from the environment, over stdin/stdout. A launch that
    finds the data directory's holder bridges to it; otherwise it becomes the holder: it
    answers at once while the engine warms up (tool calls wait), and later launches' clients are
    served over its client socket, also after its own client has left, until none has
    been connected for `client_idle_s`."""
    from engram.service.mcp.bridge import AttachRefused, attach, socket_path
    from engram.service.operator.ownership import DataDirLock, DirectoryHeld

    data_dir = settings.data_dir
    secret = _optional_host_secret(data_dir)
    binding, hello = _stdio_binding(settings, secret)
    try:
        path: Path | None = socket_path(data_dir)
    except ValueError as exc:
        echo_error(f"engram: warning: {exc}; one client at a time on this data directory")
        path = None
    deadline = time.monotonic() + ATTACH_WAIT_S
    while True:
        if path is not None:
            try:
                conn = attach(path, hello)
            except OSError:
                pass
            except AttachRefused as exc:
                echo_error(f"engram: the server holding {data_dir} refused this client ({exc})")
                raise typer.Exit(2) from None
            else:
                _bridge(conn, path, hello, data_dir)
                return
        try:
            lock = DataDirLock(data_dir).acquire()
            break
        except DirectoryHeld:
            if time.monotonic() > deadline:
                echo_error(f"engram: another engram process holds {data_dir} and serves no stdio clients")
                raise typer.Exit(2) from None
            time.sleep(ATTACH_POLL_S)
    try:
        _hold_for_stdio(settings, secret, binding)
    finally:
        lock.release()


#: How long a launch waits for the holder of its data directory to listen (it may be
#: loading the model) before giving up.
ATTACH_WAIT_S = 120.0
ATTACH_POLL_S = 0.1
#: Where a background server started for stdio clients writes its log.
BACKGROUND_LOG = "background.log"


def _optional_host_secret(data_dir: Path) -> bytes | None:
    from engram.service.mcp.host_context import load_host_secret

    try:
        return load_host_secret(data_dir)
    except RuntimeError:
        return None


def _stdio_binding(settings: Any, secret: bytes | None) -> tuple[Any, Any]:
    """This launch's binding (exit 2 without a trusted context) and the hello that asks
    the holder for the same binding."""
    from engram.models.errors import ContextUnavailable
    from engram.service.mcp.bridge import Hello
    from engram.service.mcp.host_context import CONTEXT_ENV, CONTEXT_FILE_ENV, binding_from_env

    try:
        binding = binding_from_env(os.environ, secret)
    except ContextUnavailable as exc:
        echo_error(f"engram: no trusted context for stdio ({exc.reason})")
        raise typer.Exit(2) from None
    context = {name: os.environ[name] for name in (CONTEXT_ENV, CONTEXT_FILE_ENV) if os.environ.get(name)}
    if CONTEXT_FILE_ENV in context:
        context[CONTEXT_FILE_ENV] = str(Path(context[CONTEXT_FILE_ENV]).resolve())
    hello = Hello(context=context, deadline_ms=settings.deadline_ms, approval_ttl_s=settings.approval_ttl_s)
    return binding, hello


def _hold_for_stdio(settings: Any, secret: bytes | None, binding: Any) -> None:
    """Serve this process's own client, and the bridged ones until they have gone."""
    from engram.service.mcp.stdio import serve_stdio

    with _stdio_server_parts(settings, secret) as (engine, audit, limiter, clients):
        serve_stdio(engine, binding, settings, audit, limiter)
        if clients is not None and clients.clients:
            _release_stdio()
            logging.getLogger("engram.mcp.clients").info(
                "own client left; serving %d bridged client(s) until none for %d s",
                clients.clients,
                settings.client_idle_s,
            )
            clients.wait_idle(settings.client_idle_s)


def _serve_background(settings: Any) -> None:
    """The background server of a data directory's stdio clients: started by a bridge
    that found no holder, it exits once none has been connected for `client_idle_s`."""
    with _holding_data_dir(settings.data_dir):
        with _stdio_server_parts(settings, _optional_host_secret(settings.data_dir)) as (_, _, _, clients):
            if clients is None:
                raise typer.Exit(2)
            clients.wait_idle(settings.client_idle_s)


@contextlib.contextmanager
def _stdio_server_parts(settings: Any, secret: bytes | None) -> Iterator[tuple[Any, Any, Any, Any]]:
    """The engine (warming up in the background: tool calls wait for it, see
    `service.mcp.stdio`), audit log, rate limiter, operator channel and client socket of
    a process holding the data directory for stdio clients."""
    from engram.service.engine import AUDIT_FILE
    from engram.service.mcp.audit import AuditLog
    from engram.service.mcp.rate_limit import TokenBucketLimiter

    started = _warming_up(settings)
    engine = open_engine(settings, serving=True, seed_vectors=settings.seed_vectors)
    _say_when_ready(engine, started)
    audit = AuditLog(Path(settings.data_dir) / AUDIT_FILE)
    limiter = TokenBucketLimiter(rate=settings.rate, burst=settings.burst)
    try:
        _collect_less_once_ready(engine)
        _warn_tenants_not_opted_in(engine)
        with (
            _operator_channel(engine, settings.data_dir),
            _client_socket(engine, settings, secret, audit, limiter) as clients,
        ):
            yield engine, audit, limiter, clients
    finally:
        audit.close()
        engine.close()


@contextlib.contextmanager
def _client_socket(engine: Any, settings: Any, secret: bytes | None, audit: Any, limiter: Any) -> Iterator[Any]:
    """The holder's socket for bridged stdio clients (None where the path is too long)."""
    from engram.service.mcp.client_socket import ClientSocket

    try:
        clients = ClientSocket(engine, settings.data_dir, settings, audit=audit, limiter=limiter, secret=secret).start()
    except ValueError:
        yield None
        return
    try:
        yield clients
    finally:
        clients.close()


@contextlib.contextmanager
def _stdio_clients_beside_http(engine: Any, settings: Any, secret: bytes) -> Iterator[None]:
    """`engram serve` over HTTP also serves the data directory's stdio clients."""
    from engram.service.engine import AUDIT_FILE
    from engram.service.mcp.audit import AuditLog
    from engram.service.mcp.rate_limit import TokenBucketLimiter

    audit = AuditLog(Path(settings.data_dir) / AUDIT_FILE)
    limiter = TokenBucketLimiter(rate=settings.rate, burst=settings.burst)
    try:
        with _client_socket(engine, settings, secret, audit, limiter):
            yield
    finally:
        audit.close()


def _release_stdio() -> None:
    """Point stdin and stdout at the null device: the client that launched this process
    has left, and sees its stdout close while the process serves the others."""
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)


def _bridge(first: Any, path: Path, hello: Any, data_dir: Path) -> None:
    """Relay this process's stdio to the holder until stdin closes; reconnect (starting a
    background server when nobody holds the directory) if the holder goes away."""
    from engram.service.mcp.bridge import AttachRefused, Bridge

    connections = iter([first])

    def connect() -> Any:
        return next(connections, None) or _attach_or_start(path, hello, data_dir)

    try:
        Bridge(connect, sys.stdin.buffer, sys.stdout.buffer).run()
    except (TimeoutError, AttachRefused) as exc:
        echo_error(f"engram: lost the server holding {data_dir} ({exc})")
        raise typer.Exit(1) from None


def _attach_or_start(path: Path, hello: Any, data_dir: Path) -> Any:
    """A connection to the holder, starting a background server while nobody holds the
    data directory (a killed holder's lock is gone with it; its socket file is replaced)."""
    from engram.service.mcp.bridge import attach
    from engram.service.operator.ownership import is_held

    deadline = time.monotonic() + ATTACH_WAIT_S
    started: subprocess.Popen[bytes] | None = None
    while time.monotonic() < deadline:
        try:
            return attach(path, hello)
        except OSError:
            pass
        if not is_held(data_dir) and (started is None or started.poll() is not None):
            started = _start_background(data_dir)
        time.sleep(ATTACH_POLL_S)
    raise TimeoutError(f"no server listened on {path} within {ATTACH_WAIT_S:.0f} s")


def _start_background(data_dir: Path) -> subprocess.Popen[bytes]:
    """`engram <this launch's arguments> --background`, detached, logging to
    `<data_dir>/background.log`, without this client's context in its environment."""
    from engram.service.mcp.host_context import CONTEXT_ENV, CONTEXT_FILE_ENV

    env = {k: v for k, v in os.environ.items() if k not in (CONTEXT_ENV, CONTEXT_FILE_ENV)}
    log = os.open(Path(data_dir) / BACKGROUND_LOG, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "engram.service.cli", *sys.argv[1:], "--background"],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            env=env,
            start_new_session=True,
        )
    finally:
        os.close(log)


def serve_http(settings: Any, secret: bytes, *, on_listening: Callable[[], None] | None = None) -> None:
    """Streamable HTTP under uvicorn. Alone, the engine warms up in the background and
    /readyz answers 503 until it is ready. As one of `--workers` (``on_listening``
    given), the process listens on the shared address (SO_REUSEPORT) only once its
    engine is ready, then calls ``on_listening``."""
    import uvicorn

    from engram.service.http.app import create_app

    if settings.host not in ("127.0.0.1", "localhost", "::1") and not settings.allowed_hosts:
        echo_error("engram: warning: non-loopback host without --allowed-host: DNS-rebinding protection is off")
    with _holding_data_dir(settings.data_dir):
        started = _warming_up(settings)
        engine = open_engine(settings, serving=True, serve_replica=True, seed_vectors=settings.seed_vectors)
        _say_when_ready(engine, started)
        _collect_less_once_ready(engine)
        _warn_tenants_not_opted_in(engine)
        application = create_app(engine, settings, host_secret=secret, close_engine=True)
        # log_config=None: uvicorn's loggers propagate to the handler configured above.
        logs = {"log_config": None, "log_level": settings.log_level.value}
        with _console(engine, settings) as served, _operator_channel(engine, settings.data_dir, served):
            if on_listening is None:
                with _stdio_clients_beside_http(engine, settings, secret):
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


def _warming_up(settings: Any) -> float:
    """Say what the start does before the engine opens (a first start on a large store
    takes a while, and nothing else would show); the time it began."""
    model = "load the embedding model (a first start exports its query encoder), " if settings.load_model else ""
    logger.info("warming up %s: %sbring every scope's indexes up to the journal", settings.data_dir, model)
    return time.monotonic()


def _say_when_ready(engine: Any, started: float) -> None:
    """Log once the warm-up is over, with how long it took (/readyz turns 200 then)."""

    def say() -> None:
        if engine.wait_ready():
            logger.info("ready in %.1f s", time.monotonic() - started)

    threading.Thread(target=say, name="engram-ready-log", daemon=True).start()


def _collect_less_once_ready(engine: Any) -> None:
    """Once the engine is warm, put what is loaded by then (modules, the model, the
    index maps: the process's long-lived objects) out of the cyclic collector's reach: a
    full collection then walks only what calls made since. Walking everything paused
    every thread of the server for 50 to 100 ms at a time (docs/results/)."""

    def freeze() -> None:
        if engine.wait_ready():
            gc.freeze()

    threading.Thread(target=freeze, name="engram-gc-freeze", daemon=True).start()


def _warn_tenants_not_opted_in(engine: Any) -> None:
    """Name, at start, each tenant whose memory is there but whose calls will be refused
    (bulk ingest and `engram bench` write scopes; opting in is a separate operator step)."""
    for tenant in engine.operator.tenants_not_opted_in():
        echo_error(
            f"engram: warning: tenant {tenant!r} holds memory but is not opted in: its calls are refused "
            f"(-32603, logged as 'tenant not enabled') until `engram admin tenant enable {tenant}`"
        )


@contextlib.contextmanager
def _holding_data_dir(data_dir: Path) -> Iterator[None]:
    """Hold the data directory for the life of a server; exit 1 if another process does."""
    from engram.service.operator.ownership import DataDirLock, DirectoryHeld

    try:
        lock = DataDirLock(data_dir).acquire()
    except DirectoryHeld:
        echo_error(f"engram: another engram process holds {data_dir}; one server per data directory")
        raise typer.Exit(1) from None
    try:
        yield
    finally:
        lock.release()


@contextlib.contextmanager
def _console(engine: Any, settings: Any) -> Iterator[dict[str, Any]]:
    """The operator console on its own listener when `console_port` is set; yields the
    operator-socket commands it answers (none without a console)."""
    if settings.console_port is None:
        yield {}
        return
    import time

    from engram.service.console.app import ConsoleConfig
    from engram.service.console.listener import ConsoleListener
    from engram.service.engine import AUDIT_FILE

    config = ConsoleConfig(
        audit_path=settings.data_dir / AUDIT_FILE,
        report_dirs=list(settings.console_reports),
        secure_cookie=settings.console_tls_cert is not None,
        started_at=time.time(),
    )
    try:
        console = ConsoleListener(engine, settings, config).start()
    except OSError as exc:
        echo_error(f"engram: {exc}")
        raise typer.Exit(2) from None
    echo_error(f"engram: console at {console.base_url()} (log in with `engram admin console-link`)")
    try:
        yield console.commands()
    finally:
        console.stop()


@contextlib.contextmanager
def _operator_channel(engine: Any, data_dir: Path, served: dict[str, Any] | None = None) -> Iterator[None]:
    """The live server's operator socket (<data_dir>/operator.sock, owner-only). A data
    directory whose path is too long for a Unix socket serves without one (admin
    commands are then refused while the server runs), with a warning."""
    from engram.service.operator.channel import OperatorChannel

    try:
        channel = OperatorChannel(engine, data_dir, served).start()
    except ValueError as exc:
        echo_error(f"engram: warning: no operator channel ({exc}); stop the server to run admin commands")
        yield
        return
    try:
        yield
    finally:
        channel.close()
