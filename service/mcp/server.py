"""The six tools over MCP (low-level `mcp.server.Server`), both protocol eras.

Why low-level: the contract needs exact closed schemas, per-caller tool lists and its
own error codes; the high-level server would generate schemas and errors of its own.

One pipeline for every call, over HTTP and stdio alike, each step once and in this
order: verify the host context (else -32603) -> tenant opted in (else -32603) -> tool
granted and known (else -32602 "Unknown tool") -> purpose_ref where the tool's spec
places it equals the bound purpose (else -32603) -> no duplicate keys (INVALID_SCHEMA)
-> the human's confirmation, where the spec asks for one and the client can be asked
-> rate limit (RATE_LIMITED) -> deadline (DEADLINE_EXCEEDED) -> engine -> envelope ->
audit line. The steps from the tenant to the audit run in one worker thread hop, raced
against the deadline; a call that asks a human takes two (the question is asked on the
event loop between the purpose check and the rate limit). The envelope is the
`structuredContent`, an identical JSON text copy is the text content, and `isError ==
not ok`; the result reaches the SDK in its wire form, which the SDK checks and dumps
once. Every envelope has a fresh `auditId`, and every call (protocol rejections
included) leaves one audit line, written where its answer was decided.

Nothing unexpected leaks: an engine exception becomes a STORE_UNAVAILABLE envelope,
and a middleware turns any other exception into a constant -32603, in both eras (the
SDK's handshake era would otherwise answer code 0 with the exception text). A store
that cannot say whether the tenant is opted in (unreachable, or slower than the bound
of its waits) is no verdict on the context: the call answers STORE_UNAVAILABLE
(retriable), not -32603, unless it is refused anyway.

The deadline runs from the request's arrival (:data:`ARRIVED_AT`, stamped by the HTTP
layer in front of the app, which may have spent part of it).
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any, Literal, NoReturn, Protocol

import anyio
import anyio.to_thread
import mcp_types as types
from mcp.server import Server
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from engram.models.codes import ContractError, ErrorCode
from engram.models.envelope import envelope_text, failure_envelope, success_envelope
from engram.models.errors import ContextUnavailable
from engram.models.tools import TOOLS, ToolSpec
from engram.service.engine import CallContext
from engram.service.settings import Settings
from engram.service.store import StoreUnavailable

from .audit import AuditLog, Durability, audit_digest, audit_text_digest
from .elicitation import HumanApproval, caller_of
from .host_context import check_purpose
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
#: The request header a layer in front sets on a `tools/call` whose JSON repeats a key
#: (which the SDK's parser would silently collapse): the call answers INVALID_SCHEMA.
MARK_HEADER = b"x-engram-duplicate-keys"
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


class CallObserver(Protocol):
    """Where each call's outcome and latency are counted (the HTTP room's metrics)."""

    def observe_call(self, tool: str, code: str, seconds: float) -> None: ...


def new_audit_id() -> str:
    """A fresh random audit id per call (128 bits)."""
    return "aud_" + secrets.token_hex(16)


def _arrival(request: Any) -> float:
    """When the request arrived: the stamp a layer in front left, else now."""
    scope = getattr(request, "scope", None)
    stamped = scope.get(ARRIVED_AT) if isinstance(scope, dict) else None
    return stamped if isinstance(stamped, float) else time.monotonic()


def _marked(request: Any) -> bool:
    """Whether a layer in front marked the request's JSON as repeating a key."""
    headers = getattr(request, "headers", None)
    return headers is not None and bool(headers.get(MARK_HEADER.decode()))


@dataclass(frozen=True)
class Answer:
    """An envelope and its JSON text, serialised once: the text is the text content,
    the proof that the envelope serialises, and what the audit line digests."""

    envelope: dict[str, Any]
    text: str

    @classmethod
    def of(cls, envelope: dict[str, Any]) -> Answer:
        return cls(envelope, envelope_text(envelope))

    @classmethod
    def failure(cls, code: ErrorCode, audit_id: str) -> Answer:
        return cls.of(failure_envelope(code, audit_id))

    @property
    def code(self) -> str:
        """The outcome the audit line and the metrics record: "ok" or the error code."""
        return "ok" if self.envelope["ok"] else self.envelope["error"]["code"]

    @property
    def receipt_digest(self) -> str | None:
        """The digest of the rank receipt a successful answer carries (a search's), or None."""
        value = self.envelope.get("output", {}).get("value", {}) if self.envelope["ok"] else {}
        receipt = value.get("rank_receipt")
        return receipt.get("receipt_digest") if isinstance(receipt, dict) else None


@dataclass(frozen=True)
class Refusal:
    """A protocol error (-32603 or -32602), raised to the caller instead of an envelope."""

    code: int
    message: str
    reason: str  # logged, never sent

    @classmethod
    def context(cls, reason: str) -> Refusal:
        """The one answer to anything wrong with the trusted context (no detail leaks)."""
        return cls(ContextUnavailable.code, ContextUnavailable.message, reason)

    @classmethod
    def unknown_tool(cls) -> Refusal:
        return cls(UNKNOWN_TOOL, UNKNOWN_TOOL_MESSAGE, "unknown or ungranted tool")


#: How a call ends: an envelope, a protocol error, or (2026-07-28 era) a question.
Outcome = Answer | Refusal | types.InputRequiredResult


def outcome_code(outcome: Outcome) -> str:
    """What the audit line and the metrics record for an outcome."""
    if isinstance(outcome, Answer):
        return outcome.code
    if isinstance(outcome, Refusal):
        return str(outcome.code)
    return "input_required"


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
    return types.Tool(
        name=spec.name,
        description=spec.description,
        input_schema=spec.input_schema,
        output_schema=spec.output_schema,
        annotations=types.ToolAnnotations(
            read_only_hint=not spec.mutation,
            destructive_hint=spec.destructive if spec.mutation else None,
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


class Tenant(Enum):
    """What the store says of a call's tenant."""

    ENABLED = "enabled"
    DISABLED = "disabled"
    UNKNOWN = "unknown"  # the store cannot say: no verdict on the context


class Progress(Enum):
    """How far a worker hop has taken its call."""

    QUEUED = "queued"  # the tenant not checked yet
    ADMITTED = "admitted"  # tenant, grant, purpose and keys passed
    RUNNING = "running"  # the engine began


class WorkerOutcome(Enum):
    """What a worker hop hands back instead of an outcome."""

    ABANDONED = "abandoned"  # the deadline answered first: the outcome is the loop's
    AWAITS_HUMAN = "awaits_human"  # admitted; the human is asked on the event loop


@dataclass
class DeadlineRace:
    """A worker hop racing its call's deadline: a worker that has not started the engine
    when the deadline answers never starts it, and an outcome that comes after the
    deadline's is dropped (the deadline's answer is the one audited)."""

    progress: Progress = Progress.QUEUED
    lock: threading.Lock = field(default_factory=threading.Lock)
    abandoned: bool = False
    outcome: Outcome | None = None  # set by the worker, which then audits it itself

    def admit(self) -> None:
        with self.lock:
            self.progress = Progress.ADMITTED

    def start(self) -> bool:
        """The worker may run the engine (False once the deadline has answered)."""
        with self.lock:
            if not self.abandoned:
                self.progress = Progress.RUNNING
            return not self.abandoned

    def finish(self, outcome: Outcome) -> bool:
        """Hand the worker's outcome over (False when the deadline answered first)."""
        with self.lock:
            if self.abandoned:
                return False
            self.outcome = outcome
            return True

    def abandon(self) -> Outcome | None:
        """At the deadline: the outcome that made it just in time, else none ever will."""
        with self.lock:
            if self.outcome is None:
                self.abandoned = True
            return self.outcome


@dataclass(frozen=True)
class ToolCall:
    """One `tools/call` as the pipeline carries it."""

    name: str
    spec: ToolSpec | None  # None: not a tool of this server
    arguments: Any
    audit_id: str
    started: float  # time.monotonic() the deadline runs from
    marked: bool  # its JSON repeats a key
    ctx: CallContext | None = None  # None: the context was refused
    refusal: Refusal | None = None  # why it is refused, tenant aside (no I/O)
    budget_s: float = 0.0
    asks: bool = False  # a human is asked for the confirmation it needs

    @property
    def label(self) -> str:
        """The tool name the audit line and the metrics record."""
        return self.name if self.spec is not None else "unknown"

    @property
    def deadline(self) -> float:
        return self.started + self.budget_s


class ToolFrontEnd:
    """The MCP handlers: the one call pipeline from host binding to audit line."""

    def __init__(
        self,
        engine: EngineLike,
        binding: Binding,
        *,
        audit: AuditLog | None = None,
        observer: CallObserver | None = None,
        default_deadline_ms: int,
        limiter: TokenBucketLimiter | None = None,
        approval: HumanApproval | None = None,
        tools: Mapping[str, ToolSpec] = TOOLS,
    ) -> None:
        self.engine = engine
        self.binding = binding
        self.audit = audit
        self.observer = observer
        self.limiter = limiter or TokenBucketLimiter(rate=0, burst=1)
        self.default_deadline_ms = default_deadline_ms
        self.approval = approval
        self.tools = dict(tools)
        self._definitions = {name: tool_definition(spec) for name, spec in self.tools.items()}

    @classmethod
    def configured(
        cls,
        engine: EngineLike,
        binding: Binding,
        settings: Settings,
        *,
        audit: AuditLog,
        observer: CallObserver | None = None,
        state_key: bytes | None = None,
        limiter: TokenBucketLimiter | None = None,
    ) -> ToolFrontEnd:
        """The front end `settings` describe, for HTTP and stdio alike: the per-principal
        token bucket (``limiter``, shared by the clients of one process, or a new one),
        the default deadline, human approval (its sealed state keyed by `state_key`;
        replicas sharing it accept each other's, None: a key of this process)."""
        return cls(
            engine,
            binding,
            audit=audit,
            observer=observer,
            limiter=limiter or TokenBucketLimiter(rate=settings.rate, burst=settings.burst),
            default_deadline_ms=settings.deadline_ms,
            approval=HumanApproval(settings.approval_ttl_s, state_key=state_key, caller=caller_of(binding.resolve)),
        )

    # ----------------------------------------------------------------- server

    def build_server(self) -> Server[Any]:
        server: Server[Any] = Server(
            SERVER_NAME,
            version="1.0.0",
            title=SERVER_TITLE,
            instructions=INSTRUCTIONS,
            on_list_tools=self.list_tools,
            on_call_tool=self.call_tool,  # type: ignore[arg-type]  # the result in its wire form
            # Mcp-Param header validation looks schemas up here instead of running the
            # caller-scoped tools/list handler without a caller.
            get_tool_input_schema=lambda name: self.tools[name].input_schema if name in self.tools else None,
        )
        server.middleware.append(_NoLeakMiddleware())
        if self.approval is not None:
            server.middleware.append(self.approval.boundary(SERVER_NAME))
        return server

    # ----------------------------------------------------------------- list

    async def list_tools(self, rctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        """The tools the verified context grants, once its tenant is opted in. A store
        that cannot say lists them anyway (the grants are the host's, signed; each call
        checks the tenant again and answers STORE_UNAVAILABLE meanwhile): tools/list has
        no retriable answer, and -32603 would tell the agent to stop."""
        try:
            ctx = self.binding.resolve(rctx.request)
        except ContextUnavailable as exc:
            self._refuse("tools/list", Refusal.context(exc.reason))
        tenant = await anyio.to_thread.run_sync(self._tenant, ctx)
        if tenant is Tenant.DISABLED:
            self._refuse("tools/list", Refusal.context("tenant not enabled"))
        if tenant is Tenant.UNKNOWN:
            logger.warning("tools/list: the tenant check could not reach the store; listing the granted tools")
        return types.ListToolsResult(tools=[d for name, d in self._definitions.items() if name in ctx.tools])

    # ----------------------------------------------------------------- call

    async def call_tool(
        self, rctx: Any, params: types.CallToolRequestParams
    ) -> dict[str, Any] | types.InputRequiredResult:
        call = self._call(rctx.request, params)
        outcome = await self._pipeline(rctx, params, call)
        if self.observer is not None:
            self.observer.observe_call(call.label, outcome_code(outcome), time.monotonic() - call.started)
        if isinstance(outcome, Refusal):
            self._refuse(f"tools/call {call.label}", outcome)
        return envelope_result(outcome) if isinstance(outcome, Answer) else outcome

    def _call(self, request: Any, params: types.CallToolRequestParams) -> ToolCall:
        """The call as it arrived, with its verified context, and why it is refused
        before the engine, tenant aside (no I/O): a context that does not verify or a
        purpose other than the bound one (-32603), an unknown or ungranted tool (-32602)."""
        spec = self.tools.get(params.name)
        arguments = params.arguments if params.arguments is not None else {}
        call = ToolCall(params.name, spec, arguments, new_audit_id(), _arrival(request), _marked(request))
        try:
            ctx = self.binding.resolve(request)
        except ContextUnavailable as exc:
            return replace(call, refusal=Refusal.context(exc.reason))
        budget_ms = ctx.deadline_ms if ctx.deadline_ms is not None else self.default_deadline_ms
        call = replace(call, ctx=ctx, budget_s=budget_ms / 1000.0)
        if spec is None or spec.name not in ctx.tools:
            return replace(call, refusal=Refusal.unknown_tool())
        try:
            check_purpose(ctx, spec, arguments)
        except ContextUnavailable as exc:
            return replace(call, refusal=Refusal.context(exc.reason))
        asks = self.approval is not None and ctx.confirmation is None and spec.needs_confirmation(ctx.confirm)
        return replace(call, asks=asks)

    async def _pipeline(self, rctx: Any, params: types.CallToolRequestParams, call: ToolCall) -> Outcome:
        """The call's outcome, audited. Tenant, grant, purpose and keys, then (unless a
        human is asked first) rate limit, deadline, engine and audit: one worker hop."""
        if call.ctx is None:
            return await self._audited(call, call.refusal or Refusal.context("no context"))
        outcome = await self._hop(call, admit=True)
        if outcome is not WorkerOutcome.AWAITS_HUMAN:
            return outcome
        assert self.approval is not None and call.spec is not None
        asked = await self.approval.confirm(rctx, params, call.spec, call.ctx, call.arguments)
        if isinstance(asked, types.InputRequiredResult):
            return await self._audited(call, asked)
        # The deadline runs from the human's answer.
        started = time.monotonic() if asked.confirmation is not None else call.started
        confirmed = await self._hop(replace(call, ctx=asked, started=started, asks=False), admit=False)
        assert confirmed is not WorkerOutcome.AWAITS_HUMAN
        return confirmed

    async def _hop(self, call: ToolCall, *, admit: bool) -> Outcome | Literal[WorkerOutcome.AWAITS_HUMAN]:
        """One worker thread hop of the pipeline, raced against the deadline: from the
        tenant (``admit``) or from the rate limit on, audited where it was decided."""
        race = DeadlineRace(Progress.QUEUED if admit else Progress.ADMITTED)
        try:
            with anyio.move_on_after(call.deadline - time.monotonic()) as waited:
                outcome = await anyio.to_thread.run_sync(self._steps, race, call, abandon_on_cancel=True)
            if waited.cancelled_caught:
                return await self._at_deadline(race, call)
        except Exception as exc:  # noqa: BLE001 - never leak internals
            if race.progress is Progress.QUEUED:
                raise  # the tenant check itself failed: a protocol fault (-32603)
            logger.error("engine failure in %s: %s", call.name, type(exc).__name__)
            # A mutation that began may have committed: retry with the same key.
            began = race.progress is Progress.RUNNING and call.spec is not None and call.spec.mutation
            code = ErrorCode.MUTATION_OUTCOME_UNKNOWN if began else ErrorCode.STORE_UNAVAILABLE
            return await self._audited(call, Answer.failure(code, call.audit_id))
        assert outcome is not WorkerOutcome.ABANDONED, "only the deadline abandons a worker, and it answered"
        return outcome

    def _steps(self, race: DeadlineRace, call: ToolCall) -> Outcome | WorkerOutcome:
        """In the worker thread, in this order: tenant, grant and purpose, duplicate
        keys (while the race is QUEUED); then, unless a human is asked first, rate
        limit, deadline, engine, and the audit line of whatever ended the call."""
        if race.progress is Progress.QUEUED:
            refused = self._admission(call, self._tenant(call.ctx))
            if refused is not None:
                return self._finish(race, call, refused)
            race.admit()
            if call.asks:
                return WorkerOutcome.AWAITS_HUMAN
        limited = self._limited(call)
        if limited is not None:
            return self._finish(race, call, limited)
        if not race.start():
            return WorkerOutcome.ABANDONED
        return self._finish(race, call, self._engine_answer(call))

    def _limited(self, call: ToolCall) -> Answer | None:
        """Rate limit, then deadline, before the engine: an answer that refuses, or None."""
        assert call.ctx is not None
        if not self.limiter.allow((call.ctx.tenant, call.ctx.principal)):
            return Answer.failure(ErrorCode.RATE_LIMITED, call.audit_id)
        if call.deadline - time.monotonic() <= 0:
            return Answer.failure(ErrorCode.DEADLINE_EXCEEDED, call.audit_id)
        return None

    def _engine_answer(self, call: ToolCall) -> Answer:
        """The engine's answer as an envelope; a contract failure is one too."""
        assert call.ctx is not None
        try:
            value = self.engine.execute(call.name, call.ctx, call.arguments)
        except ContractError as exc:
            return Answer.failure(exc.code, call.audit_id)
        if not isinstance(value, dict):
            raise TypeError("engine returned no value")
        # Serialised once, here in the worker rather than on the event loop: a value
        # that cannot be is an internal fault.
        return Answer.of(success_envelope(value, call.audit_id))

    def _admission(self, call: ToolCall, tenant: Tenant) -> Outcome | None:
        """What ends the call before the rate limit, given its tenant: a disabled tenant
        first, then the refusal it carries, a store that cannot say, repeated keys."""
        if tenant is Tenant.DISABLED:
            return Refusal.context("tenant not enabled")
        if call.refusal is not None:
            return call.refusal
        if tenant is Tenant.UNKNOWN:
            return Answer.failure(ErrorCode.STORE_UNAVAILABLE, call.audit_id)
        if call.marked:
            return Answer.failure(ErrorCode.INVALID_SCHEMA, call.audit_id)
        return None

    def _tenant(self, ctx: CallContext | None) -> Tenant:
        """Whether the context's tenant is opted in (blocking: it asks the store)."""
        assert ctx is not None
        try:
            enabled = self.engine.tenant_enabled(ctx.tenant)
        except StoreUnavailable:
            return Tenant.UNKNOWN
        return Tenant.ENABLED if enabled is True else Tenant.DISABLED

    def _finish(self, race: DeadlineRace, call: ToolCall, outcome: Outcome) -> Outcome | WorkerOutcome:
        """The worker's outcome, audited in the same hop before it leaves (unless the
        deadline answered first, and audits that answer)."""
        if not race.finish(outcome):
            return WorkerOutcome.ABANDONED
        self._audit_line(call, outcome)
        return outcome

    async def _at_deadline(self, race: DeadlineRace, call: ToolCall) -> Outcome:
        """The deadline passed: the worker's outcome if it made it just in time, else
        DEADLINE_EXCEEDED, or MUTATION_OUTCOME_UNKNOWN for a mutation already begun. A
        call the worker had not admitted yet keeps a refusal it is due: its tenant is
        checked once more, within a short bound."""
        in_time = race.abandon()
        if in_time is not None:
            return in_time  # audited by the worker
        if race.progress is Progress.QUEUED:
            tenant = Tenant.UNKNOWN
            with anyio.move_on_after(LATE_TENANT_CHECK_S):
                tenant = await anyio.to_thread.run_sync(self._tenant, call.ctx, abandon_on_cancel=True)
            refused = self._admission(call, tenant)
            if isinstance(refused, Refusal):
                return await self._audited(call, refused)
        began = race.progress is Progress.RUNNING and call.spec is not None and call.spec.mutation
        code = ErrorCode.MUTATION_OUTCOME_UNKNOWN if began else ErrorCode.DEADLINE_EXCEEDED
        return await self._audited(call, Answer.failure(code, call.audit_id))

    # ----------------------------------------------------------------- answers

    @staticmethod
    def _refuse(what: str, refusal: Refusal) -> NoReturn:
        logger.info("%s refused: %s", what, refusal.reason)
        raise MCPError(code=refusal.code, message=refusal.message) from None

    async def _audited(self, call: ToolCall, outcome: Outcome) -> Outcome:
        """An outcome decided on the event loop, its audit line written off it."""
        if self.audit is not None:
            await anyio.to_thread.run_sync(self._audit_line, call, outcome)
        return outcome

    def _audit_line(self, call: ToolCall, outcome: Outcome) -> None:
        """Write the call's audit line; never raises. Blocking: a mutation's line is on
        disk before its answer leaves (group commit with concurrent calls), any other
        line is written (it survives the process) and flushed by the next group."""
        if self.audit is None:
            return
        ctx = call.ctx
        answer = outcome if isinstance(outcome, Answer) else None
        durable = call.spec is not None and call.spec.mutation and answer is not None
        try:
            self.audit.record(
                audit_id=call.audit_id,
                tool=call.label,
                code=outcome_code(outcome),
                latency_ms=(time.monotonic() - call.started) * 1000.0,
                tenant=ctx.tenant if ctx else None,
                workspace=ctx.workspace if ctx else None,
                principal=ctx.principal if ctx else None,
                arguments_digest=audit_digest("arguments", {"tool": call.label, "arguments": call.arguments}),
                response_digest=None if answer is None else audit_text_digest("response", answer.text),
                receipt_digest=None if answer is None else answer.receipt_digest,
                durability=Durability.SYNCED if durable else Durability.WRITTEN,
            )
        except Exception as exc:  # noqa: BLE001 - auditing must not turn an answer into a leak
            logger.error("audit write failed: %s", type(exc).__name__)
