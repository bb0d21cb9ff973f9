"""What the indexes are fed: one flat document per record, and the passages embedded.

The engine owns records, components and citations; ranking only needs their text sorted
by kind (so the lexical channel can weight a primary component above context) and the
valid time (for recency). Keeping this shape flat and frozen makes a batch of documents
safe to hand between threads and trivially comparable in tests.

Passages: all-MiniLM-L6-v2 reads at most 256 word pieces and silently drops the rest,
about 190 English words. Long records are therefore cut into overlapping word windows
(``PASSAGE_WORDS`` long, advancing by ``PASSAGE_STRIDE``, at most ``MAX_PASSAGES`` per
record) and the semantic channel scores a record by its best passage. The first window is
what the model would have read anyway, so short records cost one vector as before; the
cap bounds the index at a few vectors per record even for very long text.

Speaker: a record whose primary text opens as a transcript line does, ``Name: words``
(one to three capitalised words, then a colon), was said by that name. The lexical
channel indexes the name as a field of its own (:attr:`IndexDocument.speaker`), so a
question naming a person can favour what that person said over what others said to or
about them, while the text itself is indexed unchanged. The contract's record has no
speaker field (and a name in the text carries no authority): this is a ranking signal
read from the text, nothing more. A title with a subtitle ("Information Science:
Theory...") reads the same way; its words then weigh a little more, as a title's would.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass

PASSAGE_WORDS = 180
PASSAGE_STRIDE = 150
MAX_PASSAGES = 4
MIN_TAIL_WORDS = 40
#: Names the windowing above: vectors computed under other windows are not these.
WINDOWING = f"words{PASSAGE_WORDS}-stride{PASSAGE_STRIDE}-max{MAX_PASSAGES}-tail{MIN_TAIL_WORDS}"
#: A transcript line's speaker: one to three capitalised words of letters (an apostrophe,
#: hyphen or full stop inside a word allowed, no digits: "Incident ERR_1234:" is a
#: label, not a name), a colon, then the words said.
_NAME_WORD = r"[^\W\d_](?:[^\W\d_]|['.-])*"
SPEAKER_LINE = re.compile(rf"\A\s*(?P<name>{_NAME_WORD}(?: {_NAME_WORD}){{0,2}}):\s+\S")


@dataclass(frozen=True)
class IndexDocument:
    """One record as both indexes see it; every text field may be empty."""

    scope_key: str
    record_id: str
    primary: str
    decision: str
    evidence: str
    context: str
    source_refs: str
    valid_time_ms: int

    def semantic_text(self) -> str:
        """The text the embedding model reads: claims and their support, not citations.

        Source references are identifiers (URLs, ticket numbers) that carry no meaning a
        sentence encoder can use; the lexical channel still matches them exactly.
        """
        return "\n".join(p for p in (self.primary, self.decision, self.evidence, self.context) if p)

    @property
    def speaker(self) -> str:
        """Who said the primary text, when it opens as a transcript line; else empty."""
        return speaker(self.primary)


def speaker(text: str) -> str:
    """The name a transcript line opens with ("Caroline: I went..." -> "Caroline"), or ""."""
    match = SPEAKER_LINE.match(text)
    if match is None or not all(word[0].isupper() for word in match["name"].split()):
        return ""
    return match["name"]


def passages(text: str) -> list[str]:
    """Cut ``text`` into the word windows the semantic channel embeds (at least one)."""
    words = text.split()
    if len(words) <= PASSAGE_WORDS:
        return [" ".join(words)]
    out: list[str] = []
    start = 0
    while len(out) < MAX_PASSAGES and start < len(words):
        if out and len(words) - start < MIN_TAIL_WORDS:
            break
        out.append(" ".join(words[start : start + PASSAGE_WORDS]))
        if start + PASSAGE_WORDS >= len(words):
            break
        start += PASSAGE_STRIDE
    return out


def passages_digest(windows: Sequence[str]) -> bytes:
    """SHA-256 of a record's passage texts (each length-prefixed, so no two lists of
    windows share a digest): vectors kept under this digest are those texts' vectors."""
    digest = hashlib.sha256()
    for window in windows:
        data = window.encode("utf-8")
        digest.update(len(data).to_bytes(8, "big"))
        digest.update(data)
    return digest.digest()
