"""The console's HTTP application: pages, their live fragments and a JSON API.

Why its own app: the console listens on a port of its own (see :mod:`.listener`), so no
MCP route is reachable through it and its session cookie means nothing to `/mcp`
(which trusts only the host's signed context). Every page needs a session from a
one-time link (:mod:`.access`); every POST must echo the session's CSRF token; every
answer carries a strict Content Security Policy (scripts and styles from this origin
only, no inline script, never framed) and is not cached. Pages are Jinja2 templates
using the vendored htmx (live lag and heartbeats) and Chart.js (plots), both served
from the package. The pages read the engine only through :mod:`.surface`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlencode

import anyio.to_thread
from fastapi import Depends, FastAPI, Form, Request
from fastapi.middleware.trustedhost import TrustedHostMiddleware
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates
from pydantic import ValidationError

from engram.models.codes import ContractError
from engram.service.engine import Engine

from . import charts, surface
from .access import COOKIE, CSRF_FIELD, CSRF_HEADER, ConsoleAccess, LinkState, Session, csrf_matches
from .audit_trail import AuditFilter, audit, recent_searches
from .reports import reports

HERE = Path(__file__).parent
#: No inline script or style, nothing from another origin, never inside a frame.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "font-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
}
#: Seconds between two refreshes of the live fragments (lag, heartbeats).
POLL_S = 2


@dataclass(frozen=True)
class ConsoleConfig:
    """What the console reads besides the engine, and how its cookie is set."""

    audit_path: Path
    report_dirs: list[Path]
    secure_cookie: bool
    started_at: float
    #: Host names a request may name (DNS-rebinding protection); "*" for any.
    allowed_hosts: tuple[str, ...] = ("*",)


class _NotLoggedIn(Exception):
    """A page or API call without a live session."""


class _CsrfRefused(Exception):
    """A state-changing request without its session's CSRF token."""


def _session(request: Request) -> Session:
    access: ConsoleAccess = request.app.state.access
    session = access.session(request.cookies.get(COOKIE))
    if session is None:
        raise _NotLoggedIn()
    request.state.session = session
    return session


async def _csrf_checked(request: Request, session: Annotated[Session, Depends(_session)]) -> Session:
    presented = request.headers.get(CSRF_HEADER)
    if presented is None and request.headers.get("content-type", "").startswith(
        ("application/x-www-form-urlencoded", "multipart/form-data")
    ):
        presented = str((await request.form()).get(CSRF_FIELD, "")) or None
    if not csrf_matches(session, presented):
        raise _CsrfRefused()
    return session


def _live(request: Request, whole: str, fragment: str) -> str:
    """The template for a page, or for its live part alone when htmx polls for it."""
    return fragment if request.url.path.startswith("/fragments/") else whole


def _audit_filter(tool: str = "", code: str = "", tenant: str = "", since: str = "", until: str = "") -> AuditFilter:
    """The audit page's filter, from its query string."""
    return AuditFilter(tool, code, tenant, since, until)


LoggedIn = Annotated[Session, Depends(_session)]
Checked = Annotated[Session, Depends(_csrf_checked)]
Wanted = Annotated[AuditFilter, Depends(_audit_filter)]


def create_console(engine: Engine, access: ConsoleAccess, config: ConsoleConfig) -> FastAPI:
    """The console app for `engine`; logins come from `access` (whose links the
    operator socket mints)."""
    surface.keep_recent_searches(engine)
    app = FastAPI(title="engram console", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.access = access
    templates = Jinja2Templates(directory=str(HERE / "templates"))
    templates.env.globals["charts"] = charts
    app.mount("/static", StaticFiles(directory=str(HERE / "static")), name="static")
    app.add_middleware(TrustedHostMiddleware, allowed_hosts=list(config.allowed_hosts))

    async def read(function: Callable[..., Any], *args: Any) -> Any:
        return await anyio.to_thread.run_sync(lambda: function(*args))

    def page(request: Request, name: str, status_code: int = 200, **values: Any) -> HTMLResponse:
        session = getattr(request.state, "session", None)
        values.update(csrf_token=session.csrf_token if session else "", poll_s=POLL_S, page=name)
        return templates.TemplateResponse(request, f"{name}.html", values, status_code=status_code)

    @app.middleware("http")
    async def security_headers(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        response = await call_next(request)
        response.headers.update(SECURITY_HEADERS)
        return response

    @app.exception_handler(_NotLoggedIn)
    async def not_logged_in(request: Request, _: _NotLoggedIn) -> Response:
        if request.url.path.startswith("/api/"):
            return JSONResponse({"error": "not logged in"}, status_code=401)
        return page(request, "login", status_code=401, state="none")

    @app.exception_handler(_CsrfRefused)
    async def csrf_refused(request: Request, _: _CsrfRefused) -> Response:
        return JSONResponse({"error": "missing or wrong CSRF token"}, status_code=403)

    @app.get("/login/{token}", response_class=HTMLResponse)
    async def login(request: Request, token: str) -> Response:
        outcome = access.exchange(token)
        if outcome.state is not LinkState.ACCEPTED or outcome.session is None:
            return page(request, "login", status_code=403, state=outcome.state.value)
        response = RedirectResponse("/", status_code=303)
        response.set_cookie(
            COOKIE,
            outcome.cookie,
            max_age=int(outcome.session.expires_at - time.time()),
            path="/",
            httponly=True,
            secure=config.secure_cookie,
            samesite="strict",
        )
        return response

    @app.post("/logout")
    async def logout(request: Request, _: Checked) -> Response:
        access.end(request.cookies.get(COOKIE))
        response = RedirectResponse("/login-ended", status_code=303)
        response.delete_cookie(COOKIE, path="/", httponly=True, secure=config.secure_cookie, samesite="strict")
        return response

    @app.get("/login-ended", response_class=HTMLResponse)
    async def logged_out(request: Request) -> Response:
        return page(request, "login", state="ended")

    @app.get("/", response_class=HTMLResponse)
    async def overview_page(request: Request, _: LoggedIn) -> Response:
        return page(request, "overview", view=await read(surface.overview, engine, config.started_at))

    @app.get("/scopes", response_class=HTMLResponse)
    @app.get("/fragments/scopes", response_class=HTMLResponse)
    async def scopes_page(request: Request, _: LoggedIn) -> Response:
        return page(request, _live(request, "scopes", "scopes_table"), rows=await read(surface.scopes, engine))

    @app.get("/scopes/{tenant}/{workspace}", response_class=HTMLResponse)
    async def scope_page(request: Request, tenant: str, workspace: str, _: LoggedIn) -> Response:
        row = await read(surface.scope, engine, tenant, workspace)
        if row is None:
            return page(request, "missing", status_code=404, what=f"scope {tenant}/{workspace}")
        return page(request, "scope", row=row)

    @app.get("/replicas", response_class=HTMLResponse)
    @app.get("/fragments/replicas", response_class=HTMLResponse)
    async def replicas_page(request: Request, _: LoggedIn) -> Response:
        return page(request, _live(request, "replicas", "replicas_table"), view=await read(surface.replicas, engine))

    @app.get("/audit", response_class=HTMLResponse)
    async def audit_page(request: Request, _: LoggedIn, wanted: Wanted, before: int | None = None) -> Response:
        view = await read(audit, config.audit_path, wanted, before)
        older = None
        if view["older"] is not None:
            older = "/audit?" + urlencode({**asdict(wanted), "before": view["older"]})
        return page(request, "audit", view=view, wanted=wanted, older=older)

    async def receipts(request: Request, status_code: int = 200, **values: Any) -> HTMLResponse:
        """The receipts page: the recent searches to pick from, and what was shown."""
        values.setdefault("result", None)
        values.setdefault("problem", None)
        searches = await read(recent_searches, config.audit_path)
        return page(request, "receipts", status_code=status_code, searches=searches, **values)

    @app.get("/receipts", response_class=HTMLResponse)
    async def receipts_page(request: Request, _: LoggedIn) -> Response:
        return await receipts(request)

    @app.post("/receipts/recent", response_class=HTMLResponse)
    async def recent_receipt_post(request: Request, _: Checked, receipt_digest: Annotated[str, Form()]) -> Response:
        shown = await read(surface.recent_receipt, engine, receipt_digest)
        if shown is None:
            problem = "this search's receipt is no longer kept (restarted, or pushed out by newer searches)"
            return await receipts(request, status_code=404, problem=problem)
        return await receipts(request, picked=receipt_digest, **shown)

    @app.post("/receipts", response_class=HTMLResponse)
    async def receipts_post(
        request: Request,
        _: Checked,
        receipt: Annotated[str, Form()],
        tenant: Annotated[str, Form()] = "",
        workspace: Annotated[str, Form()] = "",
        arguments: Annotated[str, Form()] = "",
    ) -> Response:
        # The pasted text is never echoed back: the arguments hold the query.
        try:
            body = json.loads(receipt)
            result = surface.receipt_contributions(body.get("rank_receipt", body))
        except (ValueError, AttributeError, ValidationError):
            return await receipts(request, status_code=422, problem="not a rank receipt")
        replayed = None
        if arguments.strip():
            try:
                replayed = await read(surface.replay, engine, tenant, workspace, json.loads(arguments), body)
            except ValueError:
                return await receipts(request, status_code=422, result=result, problem="arguments are not JSON")
            except ContractError as exc:
                replayed = {"refused": exc.code.value}
        return await receipts(request, result=result, replayed=replayed)

    @app.get("/reports", response_class=HTMLResponse)
    async def reports_page(request: Request, _: LoggedIn) -> Response:
        return page(request, "reports", view=await read(reports, config.report_dirs), dirs=config.report_dirs)

    @app.get("/api/overview")
    async def overview_api(_: LoggedIn) -> Any:
        return await read(surface.overview, engine, config.started_at)

    @app.get("/api/scopes")
    async def scopes_api(_: LoggedIn) -> Any:
        return await read(surface.scopes, engine)

    @app.get("/api/scopes/{tenant}/{workspace}")
    async def scope_api(tenant: str, workspace: str, _: LoggedIn) -> Any:
        row = await read(surface.scope, engine, tenant, workspace)
        return row if row is not None else JSONResponse({"error": "no such scope"}, status_code=404)

    @app.get("/api/replicas")
    async def replicas_api(_: LoggedIn) -> Any:
        return await read(surface.replicas, engine)

    @app.get("/api/audit")
    async def audit_api(_: LoggedIn, wanted: Wanted, before: int | None = None) -> Any:
        return await read(audit, config.audit_path, wanted, before)

    @app.get("/api/reports")
    async def reports_api(_: LoggedIn) -> Any:
        return await read(reports, config.report_dirs)

    return app
