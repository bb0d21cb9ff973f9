"""Operator transitions that the contract keeps off the agent path.

dispute, resolve, supersede, expire and invalidate-trust move an accepted record
between the non-terminal record states. Each is a journal event like any other, and
the projector drops the record from the indexes because only accepted_current is
ever ranked or disclosed.
"""

from __future__ import annotations

from engram.models.codes import ContractError, ErrorCode
from engram.models.scope import Scope
from engram.service.secrets import refuse_secrets

from .clock import instant, now_ms
from .dependencies import Dependencies
from .lifecycle import operator_target


def transition(deps: Dependencies, scope: Scope, record_id: str, operation: str, reason_ref: str) -> str:
    """Apply one operator transition; returns the new state."""
    refuse_secrets(reason_ref)  # the journal can never be erased
    with deps.store.transaction() as tx:
        record = tx.record(scope, record_id)
        if record is None:
            raise ContractError(ErrorCode.NOT_FOUND)
        target = operator_target(operation, record.state)
        tx.append_event(
            scope,
            "record_state_changed",
            record_id,
            {
                "operation": operation,
                "from_state": record.state,
                "to_state": target,
                "reason_ref": reason_ref,
                "principal": "operator",
            },
            instant(now_ms()),
        )
        tx.set_record_state(scope, record_id, target, drop_body=False)
    deps.projector.catch_up(scope)
    return target


def expire_due(deps: Dependencies, at_ms: int | None = None) -> list[tuple[Scope, str]]:
    """Expire every record whose retention `expires_at` has passed."""
    at = now_ms() if at_ms is None else at_ms
    expired = []
    for row in deps.store.due_for_expiry(at):
        transition(deps, row.scope, row.record_id, "expire", "retention:expires_at")
        expired.append((row.scope, row.record_id))
    return expired
