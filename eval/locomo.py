"""LoCoMo conversations in BEIR layout, enriched with LoCoMo's own question categories and
session dates.

Why: a BEIR copy of a LoCoMo conversation (one document per turn, ``<conv>:D<s>:<t>``;
one query per question with evidence, ``<conv>:q<n>`` where ``n`` is the question's
index in LoCoMo's ``qa`` list) carries neither when each session took place nor which
kind of question each is. Both are in LoCoMo's own file: ``session_<s>_date_time`` and
each question's ``category``. :func:`enrich` writes a copy of the BEIR folder with them
where ``engram eval`` reads them: ``metadata.valid_time`` (ISO 8601) on every turn, so
records carry the session's date as their valid time, and ``metadata.category`` on every
question, so the report breaks nDCG@10 down by category.

LoCoMo's licence is non-commercial: the enriched copy is written outside the repository
(an output directory inside it is refused), from a file the user brings.

Input shapes read: ``locomo10.json`` (a list of samples, each ``{"sample_id",
"conversation": {...}, "qa": [...]}``) and a single sample, either as that object or
flat (the conversation's keys and ``qa`` side by side, as the per-conversation files of
LoCoMo's multimodal release are). A BEIR conversation is paired with the sample whose
questions are its queries, text for text, so no file naming convention is assumed.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from engram.models.errors import EngramError


class EnrichError(EngramError, ValueError):
    """LoCoMo's JSON and a conversation in BEIR layout do not fit together (no sample for
    the conversation, an unknown session, a date not in LoCoMo's form)."""


CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
#: How LoCoMo writes a session's date and time: "1:56 pm on 8 May, 2023".
SESSION_DATE_FORMAT = "%I:%M %p on %d %B, %Y"
QUERY_ID = re.compile(r"^.+:q(?P<index>\d+)$")
TURN_ID = re.compile(r"^.+:D(?P<session>\d+):\d+$")
SESSION_DATE_KEY = re.compile(r"^session_(?P<session>\d+)_date_time$")


@dataclass(frozen=True)
class Sample:
    """What enrichment reads of one LoCoMo conversation."""

    questions: tuple[str, ...]
    categories: tuple[int | None, ...]
    session_dates: dict[int, str]  # session number -> ISO 8601

    @classmethod
    def read(cls, data: dict[str, Any]) -> Sample:
        conversation = data.get("conversation", data)
        qa = data.get("qa") or []
        dates = {}
        for key, value in conversation.items():
            match = SESSION_DATE_KEY.match(key)
            if match and value:
                dates[int(match["session"])] = _session_date(str(value))
        return cls(
            questions=tuple(str(q.get("question", "")) for q in qa),
            categories=tuple(q.get("category") for q in qa),
            session_dates=dates,
        )

    def asks(self, queries: dict[str, str]) -> bool:
        """Whether every query ``<conv>:q<n>`` is this sample's question ``n``, word for word."""
        for qid, text in queries.items():
            index = _query_index(qid)
            if index >= len(self.questions) or self.questions[index].strip() != text.strip():
                return False
        return bool(queries)


def read_samples(paths: Iterable[Path]) -> list[Sample]:
    """Every sample of every file (a list of samples, or one sample)."""
    out: list[Sample] = []
    for path in paths:
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
            out.extend(Sample.read(item) for item in (data if isinstance(data, list) else [data]))
        except (ValueError, AttributeError, TypeError) as exc:
            raise EnrichError(f"{path} is not LoCoMo's JSON: {exc}") from exc
    return out


def conversation_dirs(beir: Path) -> list[Path]:
    """``beir`` itself when it is one BEIR folder, else its BEIR sub-folders, by name."""
    if (beir / "corpus.jsonl").is_file():
        return [beir]
    found = sorted(p for p in beir.iterdir() if (p / "corpus.jsonl").is_file())
    if not found:
        raise EnrichError(f"{beir} holds no BEIR folder (corpus.jsonl)")
    return found


def enrich(samples: list[Sample], beir: Path, out: Path) -> list[str]:
    """Write the enriched copy of ``beir`` (one conversation, or a folder of them) into
    ``out``; the names of the conversations written. Files beside the conversations
    (licence, source notes) are copied as they are."""
    beir, out = Path(beir), Path(out)
    dirs = conversation_dirs(beir)
    single = dirs == [beir]
    written = []
    for folder in dirs:
        target = out if single else out / folder.name
        _enrich_one(samples, folder, target)
        written.append(folder.name)
    if not single:
        for path in beir.iterdir():
            if path.is_file():
                shutil.copy2(path, out / path.name)
    return written


def _enrich_one(samples: list[Sample], folder: Path, target: Path) -> None:
    queries = _rows(folder / "queries.jsonl")
    texts = {str(q["_id"]): str(q["text"]) for q in queries}
    sample = next((s for s in samples if s.asks(texts)), None)
    if sample is None:
        raise EnrichError(f"no LoCoMo sample asks the questions of {folder.name}")
    target.mkdir(parents=True, exist_ok=True)
    corpus = []
    for doc in _rows(folder / "corpus.jsonl"):
        match = TURN_ID.match(str(doc["_id"]))
        if match is None or int(match["session"]) not in sample.session_dates:
            raise EnrichError(f"{folder.name}: turn {doc['_id']} names no dated session")
        corpus.append(_with_metadata(doc, valid_time=sample.session_dates[int(match["session"])]))
    _write_rows(target / "corpus.jsonl", corpus)
    enriched = []
    for query in queries:
        category = CATEGORIES.get(sample.categories[_query_index(str(query["_id"]))] or 0)
        enriched.append(_with_metadata(query, category=category) if category else query)
    _write_rows(target / "queries.jsonl", enriched)
    shutil.copytree(folder / "qrels", target / "qrels", dirs_exist_ok=True)


def _session_date(text: str) -> str:
    try:
        return datetime.strptime(" ".join(text.split()), SESSION_DATE_FORMAT).isoformat()
    except ValueError as exc:
        raise EnrichError(f"session date {text!r} is not in LoCoMo's form (1:56 pm on 8 May, 2023)") from exc


def _query_index(query_id: str) -> int:
    match = QUERY_ID.match(query_id)
    if match is None:
        raise EnrichError(f"query id {query_id!r} is not <conversation>:q<n>")
    return int(match["index"])


def _with_metadata(row: dict[str, Any], **fields: str) -> dict[str, Any]:
    return {**row, "metadata": {**(row.get("metadata") or {}), **fields}}


def _rows(path: Path) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def _write_rows(path: Path, rows: list[dict[str, Any]]) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")
