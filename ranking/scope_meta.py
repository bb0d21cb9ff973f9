"""A semantic scope's ``meta.json``: its header, and its label map streamed row by row.

Why its own module: at a million records the file holds a million ``[record_id, labels,
valid_time]`` rows. Parsed whole (``json.load``) it became a list of a million small
lists beside the label map built from it, a transient peak of hundreds of MiB every time
the scope opened (measured in ``docs/results/``, "Streaming meta.json"). Here the
writer writes the rows a slice at a time and the reader parses them one at a time with
ijson (its C backend), so neither side ever holds more than a slice of them.

Layout (``"format": 2``): one JSON object, the header's keys first (sorted), then
``"records"``, last, so the reader has the whole header (scope key, checksum, graph)
before the first row, and stops reading the header at ``"records"``. A file written by
an earlier release has its keys all sorted (``records`` before ``scope_key`` and
``sha256``) and no ``format``: it is still read, whole, as before, and the caller
rewrites it in this layout (:attr:`SavedMeta.current` is False).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ijson

from engram.models import compact_json

#: The layout this module writes (absent in files of earlier releases).
FORMAT = 2
RECORDS = "records"
#: Rows serialised at a time by :func:`write_meta`: a slice is one orjson write
#: (``models.compact_json``: a tenth of a millisecond holding the GIL), while a
#: background save runs beside searches.
META_SLICE = 2_048

Row = tuple[str, list[int], int]


@dataclass
class SavedMeta:
    """A meta.json as read: its header, and its rows (iterate once, after checking the header)."""

    header: dict[str, Any]
    rows: Iterator[Row]
    current: bool  # False: an earlier release's layout, to be rewritten


def write_meta(path: Path, header: dict[str, Any], records: Iterable[Row]) -> None:
    """``header`` (keys sorted, ``format`` added) then ``"records"`` as
    ``[record_id, labels, valid_time]`` rows, compact, written a slice of rows at a time
    (by ``models.compact_json``, orjson: the standard library took thirteen times as
    long, holding the GIL)."""
    if RECORDS in header:
        raise ValueError("the header cannot hold the rows")
    head = json.dumps({**header, "format": FORMAT}, sort_keys=True, separators=(",", ":"))
    with open(path, "wb") as out:
        out.write(f'{head[:-1]},"{RECORDS}":['.encode())
        rows = iter(records)
        first = True
        while chunk := list(itertools.islice(rows, META_SLICE)):
            out.write((b"" if first else b",") + compact_json.dumps(chunk)[1:-1])
            first = False
        out.write(b"]}")


def read_meta(path: Path) -> SavedMeta | None:
    """The file's header and a stream of its rows; None when there is no file. A file
    that is not one raises ValueError (here or while the rows are read)."""
    try:
        handle = open(path, "rb")
    except FileNotFoundError:
        return None
    with handle:
        header = _header(handle)
    if header.get("format") == FORMAT:
        return SavedMeta(header, _rows(path), current=True)
    whole = json.loads(path.read_bytes())  # an earlier release's layout: read whole, once
    if not isinstance(whole, dict):
        raise ValueError("meta.json is not an object")
    rows = whole.pop(RECORDS)
    return SavedMeta(whole, iter(rows), current=False)


def _header(handle: Any) -> dict[str, Any]:
    """The top-level keys before ``"records"`` (all of the header, in this layout)."""
    builder = ijson.ObjectBuilder()
    try:
        for prefix, event, value in ijson.parse(handle):
            if prefix == "" and event == "map_key" and value == RECORDS:
                break
            builder.event(event, value)
    except ijson.JSONError as exc:
        raise ValueError(f"meta.json unreadable: {exc}") from None
    header = getattr(builder, "value", None)
    if not isinstance(header, dict):
        raise ValueError("meta.json is not an object")
    return header


def _rows(path: Path) -> Iterator[Row]:
    with open(path, "rb") as handle:
        try:
            # each JSON row (a list) is unpacked into the Row tuple, so no `yield from`
            for record_id, labels, valid_time in ijson.items(handle, f"{RECORDS}.item"):  # noqa: UP028
                yield record_id, labels, valid_time
        except ijson.JSONError as exc:
            raise ValueError(f"meta.json unreadable: {exc}") from None
