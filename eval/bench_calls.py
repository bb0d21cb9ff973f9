"""The bench's synthetic scope and the calls it makes on it.

One scope holds every size's corpus; the bench's own host context, the search arguments
of a hybrid or lexical search, the host context of each load client, and the note a load
client captures are built here, for the bench, the soak and the replica bench alike.
"""

from __future__ import annotations

import uuid
from typing import Any

from engram.index_data.records import DEFAULT_PURPOSE
from engram.models.tools import TOOLS
from engram.service.engine import CallContext

BENCH_SCOPE = ("bench", "synthetic")
PURPOSE = DEFAULT_PURPOSE


def bench_context(purpose: str = PURPOSE) -> CallContext:
    return CallContext(
        tenant=BENCH_SCOPE[0],
        workspace=BENCH_SCOPE[1],
        principal="bench:runner",
        agent_id="engram-bench",
        session="bench_" + uuid.uuid4().hex[:10],
        purpose=purpose,
    )


def search_args(query: str, minimum: str, limit: int = 10) -> dict[str, Any]:
    return {
        "query": query,
        "purpose_ref": PURPOSE,
        "limit": limit,
        "capability_policy": {"minimum_channels": minimum, "network": "forbid"},
    }


def load_claims(scope: tuple[str, str], client: int) -> dict[str, Any]:
    """The host context of load client ``client`` on ``scope``: its own principal, agent
    and session, every tool, nothing to confirm."""
    return {
        "tenant": scope[0],
        "workspace": scope[1],
        "principal": f"load-{client}",
        "agent_id": f"agent-{client}",
        "session": f"s-{client}",
        "purpose": PURPOSE,
        "tools": sorted(TOOLS),
        "confirm": [],
    }


def note_capture_args(i: int, client: int, run: str) -> dict[str, Any]:
    """The i-th capture of a client. ``run`` (one per bench run) is in the text: a later
    run on a reused directory would otherwise capture the same payloads again, and their
    admissions answer duplicate_exact (no projection) instead of admitting."""
    import hashlib

    text = (
        f"load run note {client}-{i} of run {run}: the nightly compaction job keeps {i % 7} replicas of shard {client}"
    )
    sha = "sha256:" + hashlib.sha256(text.encode()).hexdigest()
    t = 1_700_000_000_000 + i
    return {
        "idempotency_key": f"bench-load-{client:03d}-{i:06d}-{uuid.uuid4().hex[:8]}",
        "payload": {
            "schema_version": 2,
            "purpose_ref": PURPOSE,
            "valid_time": {"t": t},
            "components": [{"component_id": "c1", "kind": "decision", "text": text, "citation_ids": ["cit1"]}],
            "primary_component_id": "c1",
            "primary_event": {"at": t, "type_ref": "event:decided", "citation_id": "cit1"},
            "citations": [
                {
                    "citation_id": "cit1",
                    "source_ref": f"bench:{client}/{i}",
                    "locator": {"scheme": "uri", "value": f"https://example.org/{client}/{i}"},
                    "content_digest": sha,
                }
            ],
        },
        "evidence": {"evidence_ref": f"ev:{client}/{i}", "evidence_digest": sha, "citation_ids": ["cit1"]},
    }
