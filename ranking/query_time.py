"""Time in a query: whether it asks *when*, and the valid-time window it names.

Why: memory questions are about when things happened. "When did Caroline go to the
support group?" is answered by the record that dates the event ("I went yesterday"),
not by the one that only names it; "What did Nate make on 9 November, 2022?" is about
records valid on that day. Neither is visible to BM25 or to the embedding: the first
query shares no word with the turn's "yesterday", and the second's date is the record's
valid time, not its text.

* **Asks when**: the question opens with *when*, or asks which year, month, week or day,
  or how long ago or since when (:data:`WHEN_QUESTION`). The lexical channel then adds
  :data:`WHEN_WORDS` (words that date an event) to the query at the profile's
  ``when_terms_weight``.
* **Window**: the smallest absolute date, month or year the query names ("on 9 November,
  2022", "in June 2022", "in 2023"), parsed with ``dateparser``; an expression must carry
  a four-digit year to count, since a relative one ("last week", "in May") is relative to
  when the question was asked, which a search does not know. Fusion adds the profile's
  ``window_boost`` to the final score of each candidate valid inside the window
  (``[from_ms, to_ms)``, UTC), and the rank receipt names the window.

Parsing costs about 2 ms per query on this machine (``dateparser.search``), and only
profiles that use either signal parse at all.
"""

from __future__ import annotations

import re
import threading
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple

#: A question asking for a time. Anchored at the start (after an optional lead-in word)
#: so that "when" inside a clause ("what did she say when...") does not count.
WHEN_QUESTION = re.compile(
    r"^\W*(?:and\s+|so\s+|but\s+)?(?:when\b|since when\b|until when\b|how long ago\b|how long since\b"
    r"|(?:in\s+|during\s+|on\s+)?(?:what|which)\s+(?:year|month|week|day|date|time of year|season|weekend)s?\b)",
    re.IGNORECASE,
)

#: Words that date an event in conversational text: what a turn that answers "when"
#: usually says. Month names except "may" (a modal verb far more often than a month).
WHEN_WORDS = (
    "yesterday today tonight tomorrow ago last next week weekend month year morning evening night "
    "monday tuesday wednesday thursday friday saturday sunday january february march april june july "
    "august september october november december"
).split()

YEAR = re.compile(r"\b(?:1[6-9]|2\d)\d\d\b")


class ValidTimeWindow(NamedTuple):
    """A window of valid time a query names: ``[from_ms, to_ms)`` and the words naming it."""

    from_ms: int
    to_ms: int
    text: str
    #: dateparser's period: "day" (a time of day counts as its day), "week", "month" or "year".
    period: str


class QueryTime(NamedTuple):
    asks_when: bool
    window: ValidTimeWindow | None


NO_TIME = QueryTime(False, None)

_parsers: dict[str, Any] = {}
_lock = threading.Lock()


def _dateparser() -> tuple[Any, Any]:
    """``search_dates`` and a date-data parser, imported once (the import and the first
    parse take about a second: :func:`warm` pays it before a server is ready)."""
    with _lock:
        if not _parsers:
            from dateparser.date import DateDataParser
            from dateparser.search import search_dates

            _parsers["search"] = search_dates
            _parsers["period"] = DateDataParser(languages=["en"], settings={"PREFER_DAY_OF_MONTH": "first"})
        return _parsers["search"], _parsers["period"]


def asks_when(query: str) -> bool:
    return WHEN_QUESTION.search(query) is not None


def valid_time_window(query: str) -> ValidTimeWindow | None:
    """The narrowest absolute window (with a four-digit year) the query names, or None."""
    if not YEAR.search(query):
        return None  # no year, no absolute window: skip the parser
    search, period_parser = _dateparser()
    found = (
        search(query, languages=["en"], settings={"PREFER_DAY_OF_MONTH": "first", "RETURN_AS_TIMEZONE_AWARE": False})
        or []
    )
    best: ValidTimeWindow | None = None
    for text, when in found:
        if not YEAR.search(text):
            continue
        period = period_parser.get_date_data(text).period
        window = _window(when, period)
        if window is None:
            continue
        candidate = ValidTimeWindow(_ms(window[0]), _ms(window[1]), text.strip(), "day" if period == "time" else period)
        if best is None or candidate.to_ms - candidate.from_ms < best.to_ms - best.from_ms:
            best = candidate
    return best


def read_query_time(query: str, *, when: bool, window: bool) -> QueryTime:
    """The signals a profile uses (each parsed only when asked for)."""
    return QueryTime(asks_when(query) if when else False, valid_time_window(query) if window else None)


def warm() -> None:
    """Import and load the date parser now rather than on the first dated query."""
    valid_time_window("on 9 November, 2022")


def _window(when: datetime, period: str) -> tuple[datetime, datetime] | None:
    if period == "year":
        return datetime(when.year, 1, 1), datetime(when.year + 1, 1, 1)
    if period == "month":
        start = datetime(when.year, when.month, 1)
        return start, datetime(when.year + (when.month == 12), when.month % 12 + 1, 1)
    if period == "week":
        start = datetime(when.year, when.month, when.day) - timedelta(days=when.weekday())
        return start, start + timedelta(days=7)
    if period in ("day", "time"):
        start = datetime(when.year, when.month, when.day)
        return start, start + timedelta(days=1)
    return None


def _ms(moment: datetime) -> int:
    return int(moment.replace(tzinfo=UTC).timestamp() * 1000)
