"""The six tools over MCP (low-level `mcp.server.Server`), both protocol eras.

Why low-level: the contract needs exact closed schemas, per-caller tool lists and its
own error codes; the high-level server would generate schemas and errors of its own.

A call walks: verify the host context (else -32603) -> tenant opted in (else -32603)
-> tool granted and known (else -32602 "Unknown tool") -> purpose_ref equals the bound
purpose (else -32603) -> rate limit (RATE_LIMITED) -> engine in a worker thread under
the deadline -> envelope. On the common path (granted tool, right purpose, no human to
ask) the tenant, rate-limit and deadline checks run in the engine's own worker hop, in
that order, so a call costs one thread hand-off; the answers are the same. The
envelope is the `structuredContent`, an identical JSON text copy is the text content,
and `isError == not ok`; the result reaches the SDK in its wire form, which the SDK
checks and dumps once. Every envelope has a fresh `auditId`, and every call (protocol
rejections included) leaves one audit line.

Nothing unexpected leaks: an engine exception becomes a STORE_UNAVAILABLE envelope,
and a middleware turns any other exception into a constant -32603, in both eras (the
SDK's handshake era would otherwise answer code 0 with the exception text). A store
that cannot say whether the tenant is opted in (unreachable, or slower than the bound
of its waits) is no verdict on the context: the call answers STORE_UNAVAILABLE
(retriable), not -32603, unless it is refused anyway.

The deadline runs from the request's arrival (:data:`ARRIVED_AT`, stamped by the
scope router in front of the app, which may have spent part of it).
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any, Protocol

import anyio
import anyio.to_thread
import mcp_types as types
from mcp.server import Server
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from engram.models.codes import ContractError, ErrorCode
from engram.models.envelope import envelope_text, failure_envelope, success_envelope
from engram.models.errors import ContextUnavailable
from engram.models.tools import MUTATIONS, TOOLS, ToolSpec
from engram.service.engine import CallContext
from engram.service.store import StoreUnavailable

from .audit import AuditLog, Durability, audit_digest, audit_text_digest
from .duplicate_keys import MARK_HEADER
from .elicitation import HumanApproval, needs_confirmation
from .host_context import check_purpose
from .metrics import Metrics
from .rate_limit import TokenBucketLimiter

logger = logging.getLogger("engram.mcp")

SERVER_NAME = "engram-memory"
SERVER_TITLE = "sentropic.engram.memory"
INTERNAL_ERROR = -32603
UNKNOWN_TOOL = -32602
UNKNOWN_TOOL_MESSAGE = "Unknown tool"
INTERNAL_ERROR_MESSAGE = "Internal server error"
#: ASGI scope key: `time.monotonic()` when the request arrived, if a layer in front stamped it.
ARRIVED_AT = "engram.arrived_at"
#: Past the deadline, how long a tenant check may take to tell a disabled tenant's
#: refusal (-32603) from a timeout, before the call answers DEADLINE_EXCEEDED.
LATE_TENANT_CHECK_S = 0.5

INSTRUCTIONS = (
    "Governed memory for durable, cited knowledge (decisions, verified facts, conventions, "
    "pitfalls and fixes, hand-over notes). Search before capture; capture makes a pending "
    "draft; admission is requested, never assumed. Never store secrets or credentials. "
    "Act on error.code and error.retriable only. A JSON-RPC error -32603 or -32602 is not "
    "a memory answer: stop and report it, do not retry with other arguments."
)


class EngineLike(Protocol):
    def execute(self, tool: str, ctx: CallContext, arguments: dict[str, Any]) -> dict[str, Any]: ...
    def tenant_enabled(self, tenant: str) -> bool: ...
    def readiness(self) -> dict[str, Any]: ...


class Binding(Protocol):
    def resolve(self, request: Any) -> CallContext: ...


def new_audit_id() -> str:
    """A fresh random audit id per call (128 bits)."""
    return "aud_" + secrets.token_hex(16)


def _arrival(request: Any) -> float:
    """When the request arrived: the stamp a layer in front left, else now."""
    scope = getattr(request, "scope", None)
    stamped = scope.get(ARRIVED_AT) if isinstance(scope, dict) else None
    return stamped if isinstance(stamped, float) else time.monotonic()


@dataclass(frozen=True)
class Answer:
    """An envelope and its JSON text, serialised once: the text is the text content,
    the proof that the envelope serialises, and what the audit line digests."""

    envelope: dict[str, Any]
    text: str
    audited: bool = False  # its audit line is already written (by the worker that ran it)

    @classmethod
    def of(cls, envelope: dict[str, Any]) -> Answer:
        return cls(envelope, envelope_text(envelope))

    @property
    def code(self) -> str:
        """The outcome the audit line and the metrics record: "ok" or the error code."""
        return "ok" if self.envelope["ok"] else self.envelope["error"]["code"]


def envelope_result(answer: Answer) -> dict[str, Any]:
    """The MCP result for an envelope: structured copy, identical JSON text, isError.

    In its wire form, a dict: the SDK checks and dumps a tool result against the
    protocol's result model once on the way out, so building a `CallToolResult` model
    here first would validate our own output a second time and dump it once more (a
    walk of the whole envelope each). The SDK's dump of either gives the same bytes
    (tests/mcp: both eras).
    """
    return {
        "content": [{"type": "text", "text": answer.text}],
        "structuredContent": answer.envelope,
        "isError": not answer.envelope["ok"],
        "resultType": "complete",
    }


def tool_definition(spec: ToolSpec) -> types.Tool:
    """The `tools/list` entry: closed input schema, envelope output schema, hints."""
    destructive = spec.name in ("engram_memory_forget", "engram_memory_withdraw")
    return types.Tool(
        name=spec.name,
        description=spec.description,
        input_schema=spec.input_schema,
        output_schema=spec.output_schema,
        annotations=types.ToolAnnotations(
            read_only_hint=spec.read_only,
            destructive_hint=destructive if not spec.read_only else None,
            idempotent_hint=True,
            open_world_hint=False,
        ),
    )


class _NoLeakMiddleware:
    """Outermost guard: an unexpected exception becomes a constant -32603.

    The SDK's handshake-era loop would otherwise answer code 0 with `str(exc)`.
    """

    async def __call__(self, ctx: Any, call_next: Any) -> Any:
        try:
            return await call_next(ctx)
        except (MCPError, ValidationError):
            raise
        except Exception as exc:  # noqa: BLE001 - the point is to catch everything
            logger.error("unexpected %s in %s", type(exc).__name__, getattr(ctx, "method", "?"))
            raise MCPError(code=INTERNAL_ERROR, message=INTERNAL_ERROR_MESSAGE) from None


class WorkerOutcome(Enum):
    """What a call's worker hands back instead of an answer."""

    ABANDONED = "abandoned"  # the deadline answered first: the worker ran nothing, or dropped its answer
    TENANT_OFF = "tenant_off"  # the worker found the call's tenant not enabled


@dataclass(frozen=True)
class TenantCheckFault:
    """The worker's tenant check raised: re-raised on the event loop, as if checked there."""

    error: Exception


@dataclass
class DeadlineRace:
    """A call's worker racing its deadline: a worker that has not started when the
    deadline answers never starts, and an answer that comes after it is dropped (the
    deadline's answer is the one audited)."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    started: bool = False
    abandoned: bool = False
    answer: Answer | None = None  # set by the worker, which then audits it itself

    def start(self) -> bool:
        """The worker may run the engine (False once the deadline has answered)."""
        with self.lock:
            if not self.abandoned:
                self.started = True
            return self.started

    def finish(self, answer: Answer) -> bool:
        """Hand the worker's answer over (False when the deadline answered first)."""
        with self.lock:
            if self.abandoned:
                return False
            self.answer = answer
            return True

    def abandon(self) -> Answer | None:
        """At the deadline: the answer that made it just in time, else none ever will."""
        with self.lock:
            if self.answer is None:
                self.abandoned = True
            return self.answer


@dataclass(frozen=True)
class WorkerCall:
    """One tool call as its worker runs it."""

    name: str
    ctx: CallContext
    arguments: Any
    audit_id: str
    started: float
    deadline: float  # time.monotonic() by which the answer is due
    tenant_checked: bool


class ToolFrontEnd:
    """The MCP handlers: binding, grants, purpose, rate limit, deadline, envelope, audit."""

    def __init__(
        self,
        engine: EngineLike,
        binding: Binding,
        *,
        audit: AuditLog | None = None,
        metrics: Metrics | None = None,
        default_deadline_ms: int,
        limiter: TokenBucketLimiter | None = None,
        approval: HumanApproval | None = None,
        tools: Mapping[str, ToolSpec] = TOOLS,
    ) -> None:
        self.engine = engine
        self.binding = binding
        self.audit = audit
        self.metrics = metrics or Metrics()
        self.limiter = limiter or TokenBucketLimiter(rate=0, burst=1)
        self.default_deadline_ms = default_deadline_ms
        self.approval = approval
        self.tools = dict(tools)
        self._definitions = {name: tool_definition(spec) for name, spec in self.tools.items()}

    # ----------------------------------------------------------------- server

    def build_server(self) -> Server[Any]:
        server: Server[Any] = Server(
            SERVER_NAME,
            version="1.0.0",
            title=SERVER_TITLE,
            instructions=INSTRUCTIONS,
            on_list_tools=self.list_tools,
            # The SDK's runner sends a handler's dict result as it is (mcp.server.runner).
            on_call_tool=self.call_tool,  # type: ignore[arg-type]
            # Mcp-Param header validation looks schemas up here instead of running the
            # caller-scoped tools/list handler without a caller.
            get_tool_input_schema=lambda name: self.tools[name].input_schema if name in self.tools else None,
        )
        server.middleware.append(_NoLeakMiddleware())
        if self.approval is not None:
            server.middleware.append(self.approval.boundary(SERVER_NAME))
        return server

    # ----------------------------------------------------------------- context

    async def list_tools(self, rctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        """The tools the verified context grants, once its tenant is opted in. A store
        that cannot say lists them anyway (the grants are the host's, signed; each call
        checks the tenant again and answers STORE_UNAVAILABLE meanwhile): tools/list has
        no retriable answer, and -32603 would tell the agent to stop."""
        try:
            ctx = self.binding.resolve(rctx.request)
            await self._require_tenant(ctx)
        except ContextUnavailable as exc:
            logger.info("tools/list refused: %s", exc.reason)
            raise MCPError(code=ContextUnavailable.code, message=ContextUnavailable.message) from None
        except StoreUnavailable:
            logger.warning("tools/list: the tenant check could not reach the store; listing the granted tools")
        return types.ListToolsResult(tools=[d for name, d in self._definitions.items() if name in ctx.tools])

    # ----------------------------------------------------------------- call

    async def call_tool(
        self, rctx: Any, params: types.CallToolRequestParams
    ) -> dict[str, Any] | types.InputRequiredResult:
        started = _arrival(rctx.request)
        audit_id = new_audit_id()
        name = params.name
        tool_label = name if name in self.tools else "unknown"
        ctx: CallContext | None = None
        arguments: Any = params.arguments if params.arguments is not None else {}
        marked = rctx.request is not None and bool(rctx.request.headers.get(MARK_HEADER.decode()))
        try:
            ctx = self.binding.resolve(rctx.request)
            refusal = self._refusal(name, ctx, arguments)
            asks = (
                refusal is None
                and self.approval is not None
                and ctx.confirmation is None
                and needs_confirmation(name, ctx)
            )
            # The tenant is checked first. On the common path (a granted tool, the right
            # purpose, nothing to ask a human) that check runs in the engine's own worker
            # hop; anything else checks it here, before saying why else it refuses.
            tenant_checked = refusal is not None or marked or asks
            if tenant_checked:
                try:
                    await self._require_tenant(ctx)
                except StoreUnavailable:
                    if refusal is None:
                        answer = Answer.of(failure_envelope(ErrorCode.STORE_UNAVAILABLE, audit_id))
                        await self._record(audit_id, name, answer.code, started, ctx, arguments, answer)
                        return envelope_result(answer)
            if refusal is not None:
                raise refusal
        except ContextUnavailable as exc:
            logger.info("tools/call %s refused: %s", tool_label, exc.reason)
            await self._record(audit_id, tool_label, str(ContextUnavailable.code), started, ctx, arguments, None)
            raise MCPError(code=ContextUnavailable.code, message=ContextUnavailable.message) from None
        except MCPError as exc:
            await self._record(audit_id, tool_label, str(exc.code), started, ctx, arguments, None)
            raise

        if marked:
            answer = Answer.of(failure_envelope(ErrorCode.INVALID_SCHEMA, audit_id))
        else:
            if asks:
                asked = await self.approval.confirm(rctx, params, name, ctx, arguments)  # type: ignore[union-attr]
                if isinstance(asked, types.InputRequiredResult):
                    await self._record(audit_id, name, "input_required", started, ctx, arguments, None)
                    return asked
                if asked.confirmation is not None:
                    started = time.monotonic()  # the deadline runs from the human's answer
                ctx = asked
            answered = await self._execute(name, ctx, arguments, audit_id, started, tenant_checked=tenant_checked)
            if answered is None:  # the tenant is not enabled (checked in the worker)
                logger.info("tools/call %s refused: %s", tool_label, "tenant not enabled")
                await self._record(audit_id, tool_label, str(ContextUnavailable.code), started, ctx, arguments, None)
                raise MCPError(code=ContextUnavailable.code, message=ContextUnavailable.message)
            answer = answered
            if answer.audited:
                self.metrics.observe_call(name, answer.code, time.monotonic() - started)
                return envelope_result(answer)
        await self._record(audit_id, name, answer.code, started, ctx, arguments, answer)
        return envelope_result(answer)

    def _refusal(self, name: str, ctx: CallContext, arguments: Any) -> Exception | None:
        """Why the call is refused before the engine, tenant aside (no I/O): an unknown
        or ungranted tool (-32602), or a purpose other than the bound one (-32603)."""
        if name not in self.tools or name not in ctx.tools:
            return MCPError(code=UNKNOWN_TOOL, message=UNKNOWN_TOOL_MESSAGE)
        try:
            check_purpose(ctx, name, arguments)
        except ContextUnavailable as exc:
            return exc
        return None

    async def _require_tenant(self, ctx: CallContext, within_s: float | None = None) -> None:
        """ContextUnavailable unless the tenant is opted in; StoreUnavailable when the
        store cannot say (within `within_s` seconds, when given)."""
        with anyio.move_on_after(within_s) as waited:
            enabled = await anyio.to_thread.run_sync(self.engine.tenant_enabled, ctx.tenant, abandon_on_cancel=True)
        if waited.cancelled_caught:
            raise StoreUnavailable()
        if enabled is not True:
            raise ContextUnavailable("tenant not enabled")

    async def _late_tenant_refusal(self, ctx: CallContext) -> bool:
        """Past the deadline: whether the tenant is known to be disabled (the call is then
        refused, not timed out). A store that cannot say promptly is no refusal."""
        try:
            await self._require_tenant(ctx, LATE_TENANT_CHECK_S)
        except ContextUnavailable:
            return True
        except StoreUnavailable:
            pass
        return False

    def _admitted(self, ctx: CallContext, deadline: float, audit_id: str) -> Answer | None:
        """Rate limit and deadline, before the engine: an answer that refuses, or None."""
        if not self.limiter.allow((ctx.tenant, ctx.principal)):
            return Answer.of(failure_envelope(ErrorCode.RATE_LIMITED, audit_id))
        if deadline - time.monotonic() <= 0:
            return Answer.of(failure_envelope(ErrorCode.DEADLINE_EXCEEDED, audit_id))
        return None

    async def _execute(
        self, name: str, ctx: CallContext, arguments: Any, audit_id: str, started: float, *, tenant_checked: bool
    ) -> Answer | None:
        """The engine's answer, within the deadline, audited by the worker that ran it.
        Unless ``tenant_checked``, the worker checks the tenant first, and then the rate
        limit and deadline: None when the tenant is not enabled."""
        budget_ms = ctx.deadline_ms if ctx.deadline_ms is not None else self.default_deadline_ms
        deadline = started + budget_ms / 1000.0
        if tenant_checked:
            early = self._admitted(ctx, deadline, audit_id)
            if early is not None:
                return early
        elif deadline - time.monotonic() <= 0:
            if await self._late_tenant_refusal(ctx):
                return None
            return Answer.of(failure_envelope(ErrorCode.DEADLINE_EXCEEDED, audit_id))
        race = DeadlineRace()
        call = WorkerCall(name, ctx, arguments, audit_id, started, deadline, tenant_checked)
        try:
            with anyio.move_on_after(deadline - time.monotonic()) as scope:
                value = await anyio.to_thread.run_sync(self._work, race, call, abandon_on_cancel=True)
            if scope.cancelled_caught:
                return await self._answer_at_deadline(race, call)
            if value is WorkerOutcome.TENANT_OFF:
                return None
            if not isinstance(value, (Answer, TenantCheckFault)):
                raise TypeError("engine returned no value")
        except ContextUnavailable:
            return None
        except Exception as exc:  # noqa: BLE001 - never leak internals
            logger.error("engine failure in %s: %s", name, type(exc).__name__)
            if name in MUTATIONS and race.started:
                # It may have committed before failing: tell the caller to retry with the same key.
                return Answer.of(failure_envelope(ErrorCode.MUTATION_OUTCOME_UNKNOWN, audit_id))
            return Answer.of(failure_envelope(ErrorCode.STORE_UNAVAILABLE, audit_id))
        if isinstance(value, TenantCheckFault):  # as if checked on the loop: a constant -32603
            raise value.error
        return value

    def _work(self, race: DeadlineRace, call: WorkerCall) -> Answer | WorkerOutcome | TenantCheckFault:
        """In the worker thread: the tenant, rate-limit and deadline checks the loop left
        to it, then the engine, then the audit line, in this one hop."""
        ctx = call.ctx
        if not call.tenant_checked:
            try:
                enabled = self.engine.tenant_enabled(ctx.tenant)
            except StoreUnavailable:  # no verdict on the context: retry later
                return Answer.of(failure_envelope(ErrorCode.STORE_UNAVAILABLE, call.audit_id))
            except Exception as exc:  # noqa: BLE001 - a protocol fault, raised on the loop
                return TenantCheckFault(exc)
            if enabled is not True:
                return WorkerOutcome.TENANT_OFF
            early = self._admitted(ctx, call.deadline, call.audit_id)
            if early is not None:
                return early
        if not race.start():
            return WorkerOutcome.ABANDONED
        try:
            value = self.engine.execute(call.name, ctx, call.arguments)
        except ContractError as exc:
            answer = Answer.of(failure_envelope(exc.code, call.audit_id))
        else:
            if not isinstance(value, dict):
                raise TypeError("engine returned no value")
            # Serialised once, here in the worker rather than on the event loop: a value
            # that cannot be is an internal fault.
            answer = Answer.of(success_envelope(value, call.audit_id))
        if not race.finish(answer):  # the deadline answered first, and audits that answer
            return WorkerOutcome.ABANDONED
        # The audit line is written in this same worker hop, before the answer leaves.
        self._audit_line(call.audit_id, call.name, answer.code, call.started, ctx, call.arguments, answer)
        return replace(answer, audited=True)

    async def _answer_at_deadline(self, race: DeadlineRace, call: WorkerCall) -> Answer:
        """The deadline passed: the worker's answer if it made it just in time, else
        DEADLINE_EXCEEDED, or MUTATION_OUTCOME_UNKNOWN for a mutation already begun (a
        disabled tenant the worker never checked is refused instead: ContextUnavailable)."""
        in_time = race.abandon()
        if in_time is not None:
            return replace(in_time, audited=True)
        if not race.started and not call.tenant_checked and await self._late_tenant_refusal(call.ctx):
            raise ContextUnavailable("tenant not enabled")
        began_mutation = race.started and call.name in MUTATIONS
        code = ErrorCode.MUTATION_OUTCOME_UNKNOWN if began_mutation else ErrorCode.DEADLINE_EXCEEDED
        return Answer.of(failure_envelope(code, call.audit_id))

    async def _record(self, *line: Any) -> None:
        """Metrics, then the audit line off the event loop (``line`` as for :meth:`_audit_line`)."""
        _, tool, code, started, *_ = line
        self.metrics.observe_call(tool, code, time.monotonic() - started)
        if self.audit is not None:
            await anyio.to_thread.run_sync(self._audit_line, *line)

    def _audit_line(
        self,
        audit_id: str,
        tool: str,
        code: str,
        started: float,
        ctx: CallContext | None,
        arguments: Any,
        answer: Answer | None,
    ) -> None:
        """Write the call's audit line; never raises. Blocking: a mutation's line is on
        disk before its answer leaves (group commit with concurrent calls), any other
        line is written (it survives the process) and flushed by the next group."""
        if self.audit is None:
            return
        durable = tool in MUTATIONS and answer is not None
        try:
            self.audit.record(
                audit_id=audit_id,
                tool=tool,
                code=code,
                latency_ms=(time.monotonic() - started) * 1000.0,
                tenant=ctx.tenant if ctx else None,
                workspace=ctx.workspace if ctx else None,
                principal=ctx.principal if ctx else None,
                arguments_digest=audit_digest("arguments", {"tool": tool, "arguments": arguments}),
                response_digest=None if answer is None else audit_text_digest("response", answer.text),
                durability=Durability.SYNCED if durable else Durability.WRITTEN,
            )
        except Exception as exc:  # noqa: BLE001 - auditing must not turn an answer into a leak
            logger.error("audit write failed: %s", type(exc).__name__)
