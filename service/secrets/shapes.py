"""What a value looks like: generated, a word, an identifier, a placeholder.

Every rule of the scanner ends in the same question about the text it matched: is this
a made-up value (a key, a password), or a word, a name, a reference, a mask? The
answers live here, once, for the named checks (`checks.py`) and the high-entropy layer
(`entropy.py`) alike. Pure functions of a string; the vocabulary of placeholder values
is data (`rules.toml`).
"""

from __future__ import annotations

import math
import re
from collections import Counter

from .catalogue import VOCABULARY

WORD_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")
ALNUM = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")
LETTERS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")


def entropy(s: str) -> float:
    """Shannon entropy in bits per character."""
    n = len(s)
    if n == 0:
        return 0.0
    return -sum((c / n) * math.log2(c / n) for c in Counter(s).values())


def has_digit(s: str) -> bool:
    return any("0" <= c <= "9" for c in s)


def has_upper(s: str) -> bool:
    return any("A" <= c <= "Z" for c in s)


def has_lower(s: str) -> bool:
    return any("a" <= c <= "z" for c in s)


def mixed_alnum(s: str) -> bool:
    """Upper, lower and digit all present: what generated keys look like, words don't."""
    return has_digit(s) and has_upper(s) and has_lower(s)


def alnum_with_digit(s: str) -> bool:
    return has_digit(s) and (has_upper(s) or has_lower(s))


def before(text: str, i: int, chars: frozenset[str]) -> bool:
    """True when the character before position i is in `chars`."""
    return i > 0 and text[i - 1] in chars


def line_before(text: str, i: int, limit: int = 512) -> str | None:
    """The text between the start of the line and position i; None when the line is
    longer than `limit` (callers then judge only what is in reach)."""
    lo = max(0, i - limit)
    nl = text.rfind("\n", lo, i)
    if nl >= 0:
        return text[nl + 1 : i]
    return text[:i] if lo == 0 else None


def window_before(text: str, i: int, limit: int = 512) -> str:
    head = line_before(text, i, limit)
    return text[max(0, i - limit) : i] if head is None else head


_PLACEHOLDER_VALUES = frozenset(VOCABULARY["placeholders"])
_MASK_RE = re.compile(r"^(?:[*xX•.#?_\-]+|<[^>]*>|\[[^\]]*\]|\{[^}]*\}|%[^%]*%)$")
REF_RE = re.compile(r"^(?:[A-Za-z_][A-Za-z0-9_]*)(?:(?:\.|::|->)[A-Za-z_][A-Za-z0-9_]*)+$")


def looks_placeholder(v: str, quoted: bool = False) -> bool:
    low = v.lower().strip("\"'`")
    if not low or low in _PLACEHOLDER_VALUES:
        return True
    if "{{" in low or "${" in low or low[0] in "$<{":
        return True
    if not quoted and (
        low[0] in "%[(@&*"
        or "(" in low
        or ")" in low
        or low.startswith(("os.", "env.", "process.env", "settings.", "config."))
    ):
        return True
    return _MASK_RE.match(low) is not None


_TOKEN_CHARS_RE = re.compile(r"^[A-Za-z0-9+/=_\-!@#$%^&*~.?]{8,}$")
SNAKE_WORDS_RE = re.compile(r"^[A-Za-z]{2,}[0-9]{0,2}(?:[_\-][A-Za-z]{2,}[0-9]{0,2})+$")


def token_like(v: str) -> bool:
    """An unquoted value in a prose- or code-like position: only what looks generated
    counts, not words, identifiers or expressions."""
    if len(v) < 8 or not _TOKEN_CHARS_RE.match(v) or REF_RE.match(v):
        return False
    if SNAKE_WORDS_RE.match(v) or identifier_like(v):
        return False
    if alnum_with_digit(v):
        return True
    symbols = sum(c not in ALNUM for c in v)
    if symbols >= 2 and has_lower(v) and has_upper(v):
        return True
    return has_upper(v) and has_lower(v) and entropy(v) >= 3.5 and not v.istitle()


# Quoted values that describe a secret rather than being one: "hf_...", "your-api-key",
# "<token>", "MISSING", "example-password".
_DESCRIPTIVE_RE = re.compile(
    r"\.\.\.|…|^(?:your|my|insert|enter|replace|change|put|paste|add|some|the)[ _\-]|example|sample"
    r"|(?:^|[_\-. ])(?:api[_\-]?key|key|token|secret|password|passwd|pass|credentials?)(?:$|[_\-. ])"
)
SECRET_WORD_RE = re.compile(r"pass|pwd|secret|token|key|auth|cred|sess|dsn|conn")


def descriptive(v: str) -> bool:
    low = v.lower()
    if _DESCRIPTIVE_RE.search(low):
        return True
    if SNAKE_WORDS_RE.match(v) and not has_digit(v) and SECRET_WORD_RE.search(low):
        return True  # "mcp-session-id", "x_auth_token": a name, not a value
    letters = [c for c in v if c.isalpha()]
    return bool(letters) and len(letters) == len(v) and v.isupper()  # "MISSING", "NONE"


_PIECE_RE = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")
_VOWELS = frozenset("aeiouyAEIOUY")
_WORD_NUM_RE = re.compile(r"^(?:\d+|[A-Za-z]{2,}\d+|\d+[A-Za-z]{2,})$")
_SEP_RE = re.compile(r"[_\-]")


def _wordiness(core: str) -> float:
    """Share of characters in word-like pieces (3+ letters with a vowel, or an acronym)."""
    good = sum(
        len(p)
        for p in _PIECE_RE.findall(core)
        if len(p) >= 3 and p.isalpha() and (p.isupper() or any(c in _VOWELS for c in p))
    )
    return good / max(1, len(core))


def identifier_like(core: str) -> bool:
    """camelCase / PascalCase / snake_case / kebab-case names ("Qwen2_5OmniDiTRotaryEmbedding",
    "Mistral-Small-4-119B-2603"): generated keys break into 1-2 letter fragments."""
    parts = [p for p in _SEP_RE.split(core) if p]
    if len(parts) > 1 and all(len(p) <= 4 or _WORD_NUM_RE.match(p) or _wordiness(p) >= 0.6 for p in parts):
        return True
    return _wordiness(core) >= 0.6


# One marker of a cell phenotype or a gene list: a short symbol, its number, and an
# optional level ("CD4", "CD25hi", "Foxp3", "Ly6Chi", "PDGFRa"); a numbered marker may
# be followed by another without a sign ("CD25hiCD127lo"). Each piece is judged alone:
# linear in the run.
_MARKERS_RE = re.compile(r"(?:[A-Za-z]{1,6}[0-9]{1,4}[A-Za-z]{0,3})?[A-Za-z]{1,6}[0-9]{0,4}[A-Za-z]{0,3}")
_SIGNS_RE = re.compile(r"[+\-]{1,2}")


def phenotype_like(core: str) -> bool:
    """A chain of markers each followed by its sign, as immunology and genetics write
    them ("CD4+CD25hiCD127lo-Foxp3+", "Lin-Sca1+cKit+CD150+CD48-", "Cxcl9+Cxcl10+Gzmb+").
    A generated key has a sign about once in 64 characters, seldom after each short
    letters-then-digits piece and at its very end."""
    if "+" not in core or core[-1] not in "+-":
        return False
    pieces = _SIGNS_RE.split(core)[:-1]
    return len(pieces) >= 3 and all(len(p) <= 16 and _MARKERS_RE.fullmatch(p) for p in pieces)
