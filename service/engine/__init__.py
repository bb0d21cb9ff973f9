"""The memory engine: lifecycle, admission, idempotency, gates, sealing, search.

What the outer rooms (the CLI, bulk ingestion, evaluation) may use is declared here;
they never import the engine's modules directly.
"""

from .clock import now_ms
from .context import CallContext, Confirmation
from .data_directory import AUDIT_FILE, DB_FILE, MODELS_DIR, claim_data_dir
from .engine import Engine, export_keys, restore
from .gates import operation_digest
from .ingestion import (
    BatchOutcome,
    BatchWriter,
    BulkLoad,
    CommittedBatch,
    ExaminedBatch,
    PreparedBatch,
    Submission,
    WriterSpec,
    examine,
    identify,
    operator_context,
)
from .lifecycle import OPERATOR_TRANSITIONS
from .operator import Operator
from .records import index_document, scope_key
from .routing import NoLiveReplica
from .search import CANDIDATE_CAP
from .seed import HEADER as SEED_HEADER
from .sweeper import PurgeSchedule

__all__ = [
    "AUDIT_FILE",
    "CANDIDATE_CAP",
    "DB_FILE",
    "MODELS_DIR",
    "OPERATOR_TRANSITIONS",
    "SEED_HEADER",
    "BatchOutcome",
    "BatchWriter",
    "BulkLoad",
    "CallContext",
    "CommittedBatch",
    "Confirmation",
    "Engine",
    "ExaminedBatch",
    "NoLiveReplica",
    "Operator",
    "PreparedBatch",
    "PurgeSchedule",
    "Submission",
    "WriterSpec",
    "claim_data_dir",
    "examine",
    "export_keys",
    "identify",
    "index_document",
    "now_ms",
    "operation_digest",
    "operator_context",
    "restore",
    "scope_key",
]
