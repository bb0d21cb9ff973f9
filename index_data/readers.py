"""Readers: source collections as streams of IngestRecords, and aligned vector files.

Two layouts are read:

* BEIR (``corpus.jsonl`` with ``_id``, ``title``, ``text``): one record per document,
  primary component = title + newline + text, cited as ``beir:<dataset>/<_id>``. A
  document's ``metadata.valid_time`` (ISO 8601, e.g. a conversation session's date)
  becomes the record's valid time; without it, the fixed default.
* Record JSONL (``{"id", "text", "title"?, "valid_time_ms"?, "source_ref"?}`` per line).
  A line may instead carry a whole contract ``payload`` and ``evidence`` (and
  ``retention``), as ``engram admin export`` writes them: the record is then loaded as
  it was (every component and citation), after the capture tool's validation.

Vectors aligned with a corpus come as ``.npy`` (one row per document: that row is the
document's only passage vector) or ``.npz`` with ``vectors`` (one row per passage window
of :func:`ranking.documents.passages`) and ``offsets`` (document i owns rows
``offsets[i]:offsets[i+1]``). ``.npy`` files are memory-mapped, so a million-row file
never has to fit in memory.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from engram.models.errors import EngramError

from .records import DEFAULT_VALID_TIME_MS, IngestRecord


class CorpusInvalid(EngramError, ValueError):
    """A line of a corpus file that cannot be read as a document (not UTF-8, not JSON,
    no id): the message names the file, the line and what is wrong, never its text."""

    def __init__(self, path: Path, line: int | None, problem: str) -> None:
        super().__init__(f"{path}:{line}: {problem}" if line is not None else f"{path}: {problem}")
        self.path, self.line, self.problem = path, line, problem


def beir_text(title: str | None, text: str | None) -> str:
    return "\n".join(p for p in ((title or "").strip(), (text or "").strip()) if p)


def beir_valid_time_ms(doc: dict) -> int:
    """A BEIR document's ``metadata.valid_time`` (ISO 8601; UTC when it names no zone)
    in epoch milliseconds, or the fixed default when it has none."""
    stamp = (doc.get("metadata") or {}).get("valid_time")
    if not stamp:
        return DEFAULT_VALID_TIME_MS
    when = datetime.fromisoformat(str(stamp))
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return int(when.timestamp() * 1000)


def _json_lines(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) of each non-blank line of a JSONL file; CorpusInvalid for a
    line that is not UTF-8 or not one JSON object."""
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise CorpusInvalid(path, number, f"not UTF-8 (byte {exc.start + 1})") from None
            if not line.strip():
                continue
            try:
                item = json.loads(line)
            except json.JSONDecodeError as exc:
                raise CorpusInvalid(path, number, f"not JSON ({exc.msg}, column {exc.colno})") from None
            if not isinstance(item, dict):
                raise CorpusInvalid(path, number, f"a JSON {type(item).__name__}, not an object")
            yield number, item


@contextlib.contextmanager
def _line(path: Path, number: int) -> Iterator[None]:
    """A field of line ``number`` that does not fit its type is CorpusInvalid."""
    try:
        yield
    except (ValueError, TypeError) as exc:
        raise CorpusInvalid(path, number, f"a field does not fit ({type(exc).__name__}: {exc})") from None


def _id(path: Path, number: int, item: dict[str, Any], key: str, hint: str) -> str:
    value = item.get(key)
    if not isinstance(value, (str, int)) or str(value) == "":
        raise CorpusInvalid(path, number, f'no "{key}" ({hint})')
    return str(value)


def read_beir(dataset_dir: Path, name: str | None = None) -> Iterator[IngestRecord]:
    """The documents of a BEIR collection, in file order."""
    dataset_dir = Path(dataset_dir)
    name = name or dataset_dir.name
    corpus = dataset_dir / "corpus.jsonl"
    for number, doc in _json_lines(corpus):
        doc_id = _id(corpus, number, doc, "_id", "every BEIR corpus line needs one")
        with _line(corpus, number):
            record = IngestRecord(
                external_id=doc_id,
                text=beir_text(doc.get("title"), doc.get("text")),
                source_ref=f"beir:{name}/{doc_id}",
                locator_scheme="beir",
                locator_value=doc_id,
                valid_time_ms=beir_valid_time_ms(doc),
            )
        yield record


def read_jsonl(path: Path) -> Iterator[IngestRecord]:
    """Records from a JSONL file of ``{"id", "text", "title"?, "valid_time_ms"?}``."""
    path = Path(path)
    for number, item in _json_lines(path):
        hint = (
            "a BEIR line: give the collection's directory, the one holding corpus.jsonl"
            if "_id" in item
            else 'a record line needs "id" and "text"'
        )
        rec_id = _id(path, number, item, "id", hint)
        with _line(path, number):
            if "payload" in item:
                record = IngestRecord(
                    external_id=rec_id,
                    text=str(item.get("text", "")),
                    source_ref=f"export:{rec_id}",
                    payload=item["payload"],
                    evidence=item.get("evidence"),
                    retention=item.get("retention"),
                )
            else:
                record = IngestRecord(
                    external_id=rec_id,
                    text=beir_text(item.get("title"), item.get("text")),
                    source_ref=str(item.get("source_ref") or f"jsonl:{path.stem}/{rec_id}"),
                    locator_scheme="jsonl",
                    locator_value=rec_id,
                    valid_time_ms=int(item.get("valid_time_ms", DEFAULT_VALID_TIME_MS)),
                )
        yield record


def read_dataset(path: Path) -> Iterator[IngestRecord]:
    """A BEIR directory (has corpus.jsonl) or a record JSONL file."""
    path = Path(path)
    if path.is_dir():
        if not (path / "corpus.jsonl").exists():
            raise CorpusInvalid(path, None, "a directory without corpus.jsonl (not a BEIR collection)")
        return read_beir(path)
    return read_jsonl(path)


#: A conversation turn's id: ``<conversation>:D<session>:<turn>`` (LoCoMo in BEIR layout).
TURN_ID = re.compile(r"^(?P<session>.+:D\d+):(?P<turn>\d+)$")


def with_context(records: Iterable[IngestRecord], turns: int) -> Iterator[IngestRecord]:
    """``records`` with up to ``turns`` neighbouring turns on each side attached as context.

    A record is a turn when its id reads ``<conversation>:D<session>:<turn>``; its
    neighbours are the turns of the same session numbered ``turn - turns`` to
    ``turn + turns``, in order. A question about a conversation is often answered across
    turns ("what did she adopt?" / "a puppy!"), so a turn alone can miss the words that
    find it. Records that are not turns pass unchanged; ``turns`` 0 changes nothing.
    """
    if turns <= 0:
        yield from records
        return
    items = list(records)
    by_turn: dict[tuple[str, int], str] = {}
    for item in items:
        match = TURN_ID.match(item.external_id)
        if match:
            by_turn[(match["session"], int(match["turn"]))] = item.text
    for item in items:
        match = TURN_ID.match(item.external_id)
        if not match:
            yield item
            continue
        session, turn = match["session"], int(match["turn"])
        around = [
            by_turn[(session, t)]
            for t in range(turn - turns, turn + turns + 1)
            if t != turn and (session, t) in by_turn
        ]
        yield replace(item, context="\n".join(around))


def count_lines(path: Path) -> int:
    path = Path(path)
    target = path / "corpus.jsonl" if path.is_dir() else path
    with open(target, "rb") as handle:
        return sum(1 for line in handle if line.strip())


class VectorSource:
    """Per-document passage vectors from an aligned ``.npy`` or ``.npz`` file."""

    def __init__(self, vectors: np.ndarray, offsets: np.ndarray | None = None) -> None:
        if vectors.ndim != 2:
            raise ValueError("vectors must be a 2-D array")
        self.vectors = vectors
        self.offsets = offsets
        self.dim = int(vectors.shape[1])

    @classmethod
    def load(cls, path: Path) -> VectorSource:
        path = Path(path)
        if path.suffix == ".npz":
            with np.load(path) as data:
                return cls(np.asarray(data["vectors"], dtype=np.float32), np.asarray(data["offsets"]))
        return cls(np.load(path, mmap_mode="r"))

    def save(self, path: Path | BinaryIO) -> None:
        if self.offsets is None:
            np.save(path, np.asarray(self.vectors, dtype=np.float32))
        else:
            np.savez(path, vectors=np.asarray(self.vectors, dtype=np.float32), offsets=self.offsets)

    def __len__(self) -> int:
        return len(self.offsets) - 1 if self.offsets is not None else len(self.vectors)

    def rows(self, indexes: Sequence[int]) -> list[np.ndarray]:
        """Each document's passage vectors, one row per passage (float32), in the order of
        ``indexes``: read in one slice when the documents are consecutive (a batch of a
        load), which reads a memory-mapped file once instead of once a document."""
        if not indexes:
            return []
        first, last = indexes[0], indexes[-1]
        if self.offsets is None:
            if list(indexes) == list(range(first, last + 1)):
                block = np.asarray(self.vectors[first : last + 1], dtype=np.float32)
                return [block[i : i + 1] for i in range(len(indexes))]
            return [np.asarray(self.vectors[i : i + 1], dtype=np.float32) for i in indexes]
        return [np.asarray(self.vectors[self.offsets[i] : self.offsets[i + 1]], dtype=np.float32) for i in indexes]
