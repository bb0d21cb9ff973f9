"""Export: a scope's current records, in the form bulk ingestion reads back.

Taking memories out is an operator's act, never an agent's. Each accepted_current record
is opened and handed out as its contract payload, evidence and retention: what it says
and where it comes from. The actor and the receipts stay behind (they describe who wrote
it into this store, and a later import is a new decision by a new operator), and nothing
that is not current leaves (withdrawn, disputed, forgotten...). On request each record
comes with its indexed passage vectors, so an import elsewhere need not embed again.
Records come in record_id order, so two exports of the same state are identical.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from engram.models.codes import ContractError, ErrorCode
from engram.models.scope import Scope

from .dependencies import Dependencies
from .records import record_aad, scope_key
from .sealing import SealBroken

CHUNK = 500


@dataclass(frozen=True)
class ExportedRecord:
    """One current record as it leaves the store."""

    record_id: str
    payload: dict[str, Any]
    evidence: dict[str, Any]
    retention: dict[str, Any]
    trust: str
    vectors: np.ndarray | None = None


def export_records(deps: Dependencies, scope: Scope, *, vectors: bool = False) -> Iterator[ExportedRecord]:
    """Every current record of ``scope`` (with its passage vectors when ``vectors``).

    A body that cannot be opened is BLOB_MISSING and a record the semantic index does not
    hold (when vectors are asked for) is PROJECTION_STALE: an export never leaves a
    current record out silently."""
    if vectors:
        deps.projector.catch_up(scope)
    key = scope_key(scope)
    chunk = []
    for row in deps.store.live_records(scope):
        chunk.append(row)
        if len(chunk) >= CHUNK:
            yield from _open(deps, scope, key, chunk, vectors)
            chunk = []
    yield from _open(deps, scope, key, chunk, vectors)


def _open(deps: Dependencies, scope: Scope, key: str, rows: list[Any], vectors: bool) -> Iterator[ExportedRecord]:
    found = deps.ranker.passage_vectors(key, [r.record_id for r in rows]) if vectors else [None] * len(rows)
    for row, passage_vectors in zip(rows, found):
        try:
            body = deps.vault.open_json(
                row.key_id, row.sealed, record_aad(scope, row.record_id), wrapped=row.wrapped_key
            )
        except SealBroken:
            raise ContractError(ErrorCode.BLOB_MISSING) from None
        if vectors and passage_vectors is None:
            raise ContractError(ErrorCode.PROJECTION_STALE)
        yield ExportedRecord(
            row.record_id, body["payload"], body["evidence"], body["retention"], body["trust"], passage_vectors
        )
