"""A keyword-only peer's ranking, rebuilt on the standard library's SQLite FTS5.

Why: a local memory server that ranks with SQLite FTS5 alone (basic-memory, in its
offline mode) is what a user compares engram with first, and it ties a hybrid ranking on
questions without dates or numbers. ``engram eval`` reports it as an anchor
(``raw_fts5``) beside raw BM25, so every collection says whether the lexical channel and
hybrid beat it, query by query.

The peer's scheme, as its search code builds it (basicmachines-co/basic-memory, main branch
of 2026-08: ``sqlite_search_repository.py``, ``search_query.py``; rules re-expressed here,
no code taken):

- One FTS5 table, ``tokenize='unicode61 tokenchars 0x2F'`` (case folded, diacritics
  removed, ``/`` inside a token, no stemming), ``prefix='1,2,3,4'``; a document is a note
  with an empty title and its text as the body, which the peer indexes twice
  (``content_stems`` and ``content_snippet``). Rows match when the expression matches one
  column (title, either body column); they are ranked by ``bm25()`` over every column,
  lowest first (ties here: document id).
- The strict expression: a query holding `` AND ``, `` OR `` or `` NOT `` is a boolean
  query (each operand as it stands, quoted where it holds punctuation, no prefix). Else
  the sentence punctuation ``?!.,;:`` is stripped from the edges of its words; a query
  with a quote, apostrophe, bracket or symbol becomes one quoted phrase with a prefix
  star, as does a multi-word query with a word holding ``. : ; , < > ? / -``; any other
  multi-word query requires every word, each as a prefix (``w1* AND w2*``), and a single
  plain word is a prefix.
- Only when the strict expression finds nothing: the relaxed expression, every word of
  the query lowercased that is not one of :data:`RELAXATION_STOPWORDS`, each as a
  prefix, joined by ``OR``. It is refused (the answer stays empty) for a query with a
  quote or a boolean operator, of fewer than three words, or holding a word that is a
  number. (The peer's separate rule for CJK queries is not rebuilt: the collections are
  English.)
- A malformed expression is an empty answer, as the peer answers an FTS5 syntax error.
"""

from __future__ import annotations

import re
import sqlite3
import unicodedata
from collections.abc import Callable, Sequence

#: The peer's relaxation stopwords (interrogatives and function words).
RELAXATION_STOPWORDS = frozenset(
    "a an and are as at be but by did do does for from had has have how i in is it of on "
    "or our that the their they this to was we were what when where which who whom whose why "
    "will with you your".split()
)
_BOOLEAN = (" AND ", " OR ", " NOT ")
_EDGE_PUNCTUATION = "?!.,;:"
#: Characters that make the peer quote a term as one phrase.
_PROBLEMATIC = frozenset("\"'()[]{}+!@#$%^&=|\\~`")
_NEEDS_QUOTING = frozenset(" .:;,<>?/-")
#: Punctuation the peer keeps inside a word when it stands between two letters.
_WORD_INTERNAL = "'\u2018\u2019\uff07\u00b7\u0387\u055f\u05f3\u05f4\u2027"
_SCHEMA = (
    "CREATE VIRTUAL TABLE notes USING fts5(id UNINDEXED, title, content_stems, content_snippet, "
    "tokenize='unicode61 tokenchars 0x2F', prefix='1,2,3,4')"
)
_SEARCH = (
    "SELECT id, bm25(notes) AS score FROM notes WHERE (notes.title MATCH :text "
    "OR notes.content_stems MATCH :text OR notes.content_snippet MATCH :text) "
    "ORDER BY score ASC, id ASC LIMIT :limit"
)


def _quoted(term: str, prefix: bool) -> str:
    return '"' + term.replace('"', '""') + '"' + ("*" if prefix else "")


def _single_term(term: str, *, prefix: bool) -> str:
    """One operand (no boolean operator) as the peer writes it in FTS5 syntax."""
    term = term.strip()
    if not term or ("*" in term and all(c.isalnum() or c in "*_-" for c in term)):
        return term
    if " " in term:
        term = " ".join(w for w in (word.strip(_EDGE_PUNCTUATION) for word in term.split()) if w)
        if not term:
            return ""
    problematic = any(c in _PROBLEMATIC for c in term)
    if not problematic and not any(c in _NEEDS_QUOTING for c in term):
        return f"{term}*" if prefix else term
    words = term.split()
    if " " in term and not problematic and not any(c in _NEEDS_QUOTING for w in words for c in w):
        return " AND ".join(f"{w}*" if prefix else w for w in words)
    return _quoted(term, prefix and not ("/" in term and term.endswith(".md")))


def _boolean(query: str) -> str:
    """A boolean query: operators kept, each operand unprefixed, brackets kept."""
    out = []
    for part in (p.strip() for p in re.split(r"(\bAND\b|\bOR\b|\bNOT\b)", query)):
        if not part:
            continue
        if part in ("AND", "OR", "NOT"):
            out.append(part)
        elif "(" in part or ")" in part:
            pieces = re.split(r"([()])", part)
            out.append(
                "".join(
                    p
                    if p in "()"
                    else (_quoted(p.strip(), False) if any(c in _NEEDS_QUOTING for c in p.strip()) else p.strip())
                    for p in pieces
                    if p.strip() or p in "()"
                )
            )
        else:
            out.append(_single_term(part, prefix=False))
    return " ".join(out)


def strict_expression(query: str) -> str:
    """The expression the peer tries first ('' when the query holds no word)."""
    text = query.strip()
    if not text or text == "*":
        return ""
    if any(op in f" {text} " for op in _BOOLEAN):
        return _boolean(text)
    return _single_term(text, prefix=True)


def _attached(char: str) -> bool:
    """A combining mark or an invisible format character (not a zero-width space)."""
    category = unicodedata.category(char)
    return category.startswith("M") or (category == "Cf" and char != "\u200b")


def _word_tokens(text: str) -> list[str]:
    """Runs of letters and digits, with the marks and the apostrophes (between two
    letters) written inside a word."""
    tokens, current = [], ""
    for i, char in enumerate(text):
        inside = bool(current) and (
            _attached(char)
            or (
                char in _WORD_INTERNAL
                and current.rstrip("".join(c for c in current if _attached(c)))[-1:].isalpha()
                and next((c for c in text[i + 1 :] if not _attached(c)), "").isalpha()
            )
        )
        if char.isalnum() or inside:
            current += char
        elif current:
            tokens.append(current)
            current = ""
    if current:
        tokens.append(current)
    return tokens


def _numeric(token: str) -> bool:
    core = [c for c in token if not _attached(c)]
    return bool(core) and all(unicodedata.category(c).startswith("N") for c in core)


def relaxed_expression(query: str) -> str | None:
    """The peer's fallback for a strict expression that found nothing, or None where it
    refuses one (a quote, a boolean operator, fewer than three words, a number)."""
    text = query.strip()
    if not text or '"' in text or any(op in f" {text} " for op in _BOOLEAN):
        return None
    tokens = _word_tokens(text.lower())
    if len(tokens) < 3 or any(_numeric(t) for t in tokens):
        return None
    words = list(dict.fromkeys(t for t in tokens if t not in RELAXATION_STOPWORDS)) or list(dict.fromkeys(tokens))
    return " OR ".join(_quoted(w, True) if "'" in w else f"{w}*" for w in words)


def fts5_search(docs: Sequence[tuple[str, str]], depth: int) -> Callable[[str], list[str]]:
    """A search function over ``docs`` ((id, text) pairs) ranking as the peer does:
    query -> up to ``depth`` ids, best first."""
    db = sqlite3.connect(":memory:", check_same_thread=False)
    db.execute(_SCHEMA)
    db.executemany(
        "INSERT INTO notes (id, title, content_stems, content_snippet) VALUES (?, '', ?, ?)",
        [(doc_id, text, text) for doc_id, text in docs],
    )

    def run(expression: str) -> list[str]:
        try:
            return [row[0] for row in db.execute(_SEARCH, {"text": expression, "limit": depth})]
        except sqlite3.OperationalError:  # an FTS5 syntax error: the peer answers nothing
            return []

    def search(query: str) -> list[str]:
        strict = strict_expression(query)
        found = run(strict) if strict else []
        if not found and (relaxed := relaxed_expression(query)):
            found = run(relaxed)
        return found

    return search
