"""The matcher: the tables of `rules.toml` compiled into rules, and how one is run.

A rule is data (an id, a pattern, a boundary, a named check, its trigger literals);
this module compiles each once at import and runs one on a text. The shared endings of
the assignment and prose rules (operator and value) are written here once, since their
named groups are what the checks read.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .catalogue import TABLES
from .checks import Check, build_check
from .shapes import ALNUM, LETTERS, WORD_CHARS, before

#: The layers of `rules.toml` made of pattern rules, in the order a scan tries them.
LAYERS = ("provider", "context", "assignment", "prose", "environment")

_BOUNDARIES: dict[str, frozenset[str] | None] = {
    "word": WORD_CHARS,
    "letters": LETTERS,
    "alnum": ALNUM,
    "word-dash": WORD_CHARS | {"-"},
    "none": None,
}

_TAILS = {
    # `key = value`, `"key": "value"`, `key: value`, `key := value`, `key => value`
    "assignment": (
        r"(?P<kq>[\"'`]?)\]?(?P<sp>[ \t]*)"
        r"(?P<op>:=|=>|->|=(?!=)|:(?![:/]))[ \t]*"
        r"(?:(?P<vq>[\"'`])(?P<qval>[^\"'`\r\n]{1,512}?)(?P=vq)|(?P<val>[^\s\"'`,;&)\]}]{1,512}))"
    ),
    # `password is hunter2`, `passwords: "..."`, `api key was now set to ...`
    "prose": (
        r"s?(?:[ \t]+(?:is|was)(?:[ \t]+(?:now|still|just|set[ \t]+to))?[ \t]*:?|[ \t]*:)[ \t]*"
        r"(?:(?P<q>[\"'`\u201c\u2018])(?P<qv>[^\"'`\u201d\u2019\r\n]{3,128}?)[\"'`\u201d\u2019]"
        r"|(?P<v>[^\s\"'`\u201c\u201d]{4,128}))"
    ),
}


@dataclass(frozen=True, slots=True)
class Rule:
    """One compiled table entry."""

    id: str
    pattern: re.Pattern[str]
    lower: bool  # matched against the ASCII-lowered copy (same offsets)
    boundary: frozenset[str] | None  # the char before the match must not be in this set
    check: Check | None  # extra test on (match, original text)
    triggers: tuple[str, ...]  # lower-case literals, one of which every match contains

    def hits(self, text: str, low: str) -> bool:
        """Whether the rule matches `text` (`low`: its ASCII-lowered copy)."""
        for m in self.pattern.finditer(low if self.lower else text):
            if self.boundary is not None and before(text, m.start(), self.boundary):
                continue
            if self.check is None or self.check(m, text):
                return True
        return False


def literal_prefix(pattern: str) -> str:
    """The literal text every match of `pattern` starts with ('' when there is none)."""
    out: list[str] = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            if i + 1 < len(pattern) and not pattern[i + 1].isalnum():
                ch, i = pattern[i + 1], i + 2
            else:
                break
        elif c in ".^$*+?{}[]|()":
            break
        else:
            ch, i = c, i + 1
        if i < len(pattern) and pattern[i] in "*?{":
            break
        out.append(ch)
    return "".join(out)


def compile_rule(entry: Mapping[str, Any]) -> Rule:
    """A rule from its table entry (the table's defaults already applied)."""
    source = entry["pattern"]
    triggers = tuple(entry.get("triggers", ()))
    if not triggers:
        prefix = literal_prefix(source)
        if len(prefix) < 2:
            raise ValueError(f"rule {entry['id']!r} needs explicit triggers")
        triggers = (prefix.lower(),)
    return Rule(
        id=entry["id"],
        pattern=re.compile(source + _TAILS.get(entry.get("tail", ""), "")),
        lower=bool(entry.get("lower", False)),
        boundary=_BOUNDARIES[entry.get("boundary", "word")],
        check=build_check(entry),
        triggers=triggers,
    )


def _layer(name: str) -> tuple[Rule, ...]:
    defaults = TABLES.get("defaults", {}).get(name, {})
    return tuple(compile_rule({**defaults, **entry}) for entry in TABLES[name])


#: Each layer's rules, compiled, in file order.
RULES: dict[str, tuple[Rule, ...]] = {name: _layer(name) for name in LAYERS}
