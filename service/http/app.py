"""The HTTP application: MCP mounted at `/mcp` (streamable HTTP, both eras) plus ops routes.

Why FastAPI around the MCP app: liveness, readiness and metrics are ordinary HTTP routes
with an OpenAPI page, while `/mcp` is the SDK's streamable-HTTP endpoint. A mounted
sub-app's lifespan does not run, so the session manager runs in this app's lifespan.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Annotated, Any

import anyio.to_thread
from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import JSONResponse, Response
from mcp.server.transport_security import TransportSecuritySettings

from engram.service.engine import AUDIT_FILE
from engram.service.mcp.audit import AuditLog
from engram.service.mcp.host_context import HeaderBinding
from engram.service.mcp.server import EngineLike, ToolFrontEnd
from engram.service.settings import Settings

from .body_limit import BodyLimit
from .duplicate_keys import DuplicateKeyMarker
from .metrics import Metrics
from .router import ScopeRouter

logger = logging.getLogger("engram.http")

LOOPBACK = ("127.0.0.1", "localhost", "::1")


def _transport_security(host: str, allowed_hosts: list[str] | None) -> TransportSecuritySettings | None:
    """DNS-rebinding protection: on for loopback (the SDK default), or for a host list."""
    if allowed_hosts:
        return TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=list(allowed_hosts),
            allowed_origins=[f"http://{h}" for h in allowed_hosts] + [f"https://{h}" for h in allowed_hosts],
        )
    if host in LOOPBACK:
        return None  # the SDK turns protection on for loopback hosts itself
    return TransportSecuritySettings(enable_dns_rebinding_protection=False)


#: Liveness, readiness and metrics: ordinary HTTP routes for operators and probes,
#: reading the engine and the metrics the app was built with (``app.state``).
ops = APIRouter(tags=["ops"])


def _engine(request: Request) -> EngineLike:
    engine: EngineLike = request.app.state.engine
    return engine


def _metrics(request: Request) -> Metrics:
    metrics: Metrics = request.app.state.metrics
    return metrics


@ops.get("/healthz", summary="Liveness: the process serves HTTP.")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@ops.get(
    "/readyz",
    summary="Readiness: the engine can answer (projections caught up, model loaded). 503 otherwise.",
    responses={503: {"description": "Not ready; `reasons` says why."}},
)
async def readyz(engine: Annotated[EngineLike, Depends(_engine)]) -> JSONResponse:
    try:
        state = await anyio.to_thread.run_sync(engine.readiness)
        ready = bool(state.get("ready"))
        reasons = [str(r) for r in state.get("reasons", [])]
    except Exception as exc:  # noqa: BLE001
        logger.error("readiness failed: %s", type(exc).__name__)
        ready, reasons = False, ["readiness check failed"]
    return JSONResponse({"ready": ready, "reasons": reasons}, status_code=200 if ready else 503)


@ops.get("/metrics", summary="Prometheus metrics (text exposition format).")
async def metrics_route(metrics: Annotated[Metrics, Depends(_metrics)]) -> Response:
    content = await anyio.to_thread.run_sync(metrics.render)  # reads the store
    return Response(content=content, media_type=metrics.content_type)


def _metrics_of(engine: EngineLike) -> Metrics:
    """The app's metrics: per-scope counts from the engine, and the per-channel ranking
    latency (lexical, semantic, fusion) where the engine reports it."""
    metrics = Metrics(
        scope_stats=getattr(engine, "scope_stats", None),
        store_connectivity=getattr(engine, "store_connectivity", None),
    )
    hook = getattr(engine, "set_channel_latency_observer", None)
    if callable(hook):
        hook(metrics.observe_channel_latency)
    return metrics


def _router(engine: EngineLike, mcp_app: Any, settings: Settings, host_secret: bytes, audit: AuditLog) -> Any:
    """A replica of a group (shared store) forwards calls of other groups' scopes; None
    when the engine is not routed."""
    if not getattr(engine, "routed", False):
        return None
    return ScopeRouter(
        DuplicateKeyMarker(mcp_app),
        secret=host_secret,
        destination=engine.route_destination,  # type: ignore[attr-defined]  # a routed engine has it
        replica_id=engine.replica_id,  # type: ignore[attr-defined]
        deadline_ms=settings.deadline_ms,
        approval_ttl_s=settings.approval_ttl_s,
        audit=audit,
    )


def create_app(
    engine: EngineLike,
    settings: Settings,
    *,
    host_secret: bytes,
    audit_path: Path | None = None,
    close_engine: bool = False,
) -> FastAPI:
    """Build the app for `engine`, verifying contexts with `host_secret`.

    `settings` gives the host and allowed hosts (DNS-rebinding protection), the
    per-principal token bucket (`rate`, `burst`; rate 0 turns it off) and the default
    deadline. The audit log goes to `audit_path`, else `<data_dir>/audit.jsonl`.
    With `close_engine`, the engine is closed when the app shuts down.
    """
    audit = AuditLog(audit_path if audit_path is not None else Path(settings.data_dir) / AUDIT_FILE)
    metrics = _metrics_of(engine)
    # Contexts come from the header; replicas sharing the host secret accept each
    # other's sealed elicitation state.
    front = ToolFrontEnd.configured(
        engine, HeaderBinding(host_secret), settings, audit=audit, observer=metrics, state_key=host_secret
    )
    server = front.build_server()
    mcp_app = server.streamable_http_app(
        streamable_http_path="/mcp",
        host=settings.host,
        transport_security=_transport_security(settings.host, settings.allowed_hosts),
    )
    router = _router(engine, mcp_app, settings, host_secret, audit)

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        async with server.session_manager.run():
            yield
        if router is not None:
            await router.aclose()
        audit.close()
        if close_engine and hasattr(engine, "close"):
            await anyio.to_thread.run_sync(engine.close)

    app = FastAPI(
        title="engram",
        version="1.0.0",
        summary="Governed memory for AI agents. The MCP endpoint is POST/GET/DELETE /mcp "
        "(streamable HTTP); the routes below are for operators and probes.",
        lifespan=lifespan,
    )
    app.state.front = front
    app.state.metrics = metrics
    app.state.engine = engine
    app.state.mcp_server = server
    app.include_router(ops)
    # Last, so the routes above (and /docs, /openapi.json) win; the sub-app serves /mcp.
    app.mount("/", router if router is not None else DuplicateKeyMarker(mcp_app))
    # Outermost: an oversized body is refused before routing, authentication or parsing.
    app.add_middleware(BodyLimit)
    return app
