"""The named checks a rule's match must pass, and the credentials-in-URL step.

A pattern finds where a secret could be; a check decides whether what it found is one
(a value that looks generated, not a placeholder, a variable or a description). Rules
in `rules.toml` name their check (``check = "assignment"``) with its parameters;
:func:`build_check` makes the callable.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Callable, Mapping
from typing import Any

from .shapes import (
    ALNUM,
    REF_RE,
    SECRET_WORD_RE,
    alnum_with_digit,
    before,
    descriptive,
    entropy,
    has_digit,
    has_upper,
    identifier_like,
    line_before,
    looks_placeholder,
    mixed_alnum,
    token_like,
    window_before,
)

#: A test on (match, original text): the match may be on the ASCII-lowered copy.
Check = Callable[[re.Match[str], str], bool]


def group_text(m: re.Match[str], text: str, group: str | int = 0) -> str:
    """A group of a match, read from the original text (the match may be on the lowered copy)."""
    s, e = m.span(group)
    return text[s:e] if s >= 0 else ""


def _jwt(m: re.Match[str], text: str) -> bool:
    head = m.group(0).split(".", 1)[0]
    try:
        raw = base64.urlsafe_b64decode(head + "=" * (-len(head) % 4))
        obj = json.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError, binascii.Error):
        # A truncated header with two more segments still has the shape of a JWT.
        return True
    return isinstance(obj, dict)


def _bearer(m: re.Match[str], text: str) -> bool:
    token = group_text(m, text, "tok")
    return alnum_with_digit(token) and entropy(token) >= 3.0


def _azure_sas(m: re.Match[str], text: str) -> bool:
    return before(text, m.start(), frozenset("?&")) and ("sv=" in text or "se=" in text)


def _endpoint_before(m: re.Match[str], text: str) -> bool:
    return "Endpoint" in window_before(text, m.start())


_CONN_HEAD_RE = re.compile(
    r"(?:server|data source|host|address|addr|endpoint|database|initial catalog|uid|user id|driver)"
    r"[ \t]*=[^;]*;",
)


def _connection_password(m: re.Match[str], text: str) -> bool:
    if looks_placeholder(group_text(m, text, "pw")):
        return False
    return _CONN_HEAD_RE.search(window_before(text, m.start()).lower()) is not None


# --------------------------------------------------------------------------------------
# assignments: `password = "..."`, `"api_key": "..."`, `token: ...`

_IDENT_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_YAML_HEAD_RE = re.compile(r"^[ \t]*(?:export[ \t]+|set[ \t]+|-[ \t]+)?[\"']?[A-Za-z0-9_.\-]*$")
_LINE_END_RE = re.compile(r"[ \t]*(?:#.*)?(?:\r?\n|$)")
_KEY_OWNER_RE = re.compile(
    r"(?:secret|private|signing|encryption|master|api|access|auth|client|app|account|service"
    r"|license|subscription|consumer|storage|session|webhook|x-api)[_\-. ]?$"
)


def _variable_name(v: str, keyword: str) -> bool:
    """An identifier value that names a secret ("db_password", "authKey", "token")."""
    low = v.lower()
    if not SECRET_WORD_RE.search(low):
        return False
    camel = any(a.islower() and b.isupper() for a, b in zip(v, v[1:]))
    return "_" in v or camel or low.endswith(keyword)


def _assignment(m: re.Match[str], text: str, weak: bool = False) -> bool:
    key_quoted = bool(m.group("kq")) or before(text, m.start(), frozenset("\"'`"))
    op = m.group("op")
    head = line_before(text, m.start())
    alone = head is not None and _YAML_HEAD_RE.match(head) is not None and _LINE_END_RE.match(text, m.end()) is not None
    if m.group("qval") is not None:
        v = group_text(m, text, "qval")
        if len(v) < 4 or looks_placeholder(v, quoted=True) or descriptive(v):
            return False
        if " " in v.strip():
            # UI strings and messages, unless the words hide a generated value
            return token_like(v.replace(" ", ""))
        if weak:
            return token_like(v) or (alone and len(v) >= 6)
        if key_quoted or op in ("=", ":=", "=>"):
            # "password": "..." (JSON) or password = "..." (code): a literal secret.
            return True
        # `password: "x"` with a bare key: YAML when alone on its line, else a quotation.
        return (alone and len(v) >= 6) or token_like(v)
    v = group_text(m, text, "val")
    if len(v) < 4 or looks_placeholder(v) or (v.isdigit() and len(v) < 8):
        return False
    if REF_RE.match(v) or descriptive(v) or "[" in v:
        return False  # settings.KEY, "your-key", auth[1], Annotated[...]
    ident = _IDENT_RE.match(v) is not None
    if ident and _variable_name(v, m.group(0)[: m.start("kq") - m.start()]):
        return False  # unk_token=unk_token, password=db_password: a variable, not a value
    if weak:
        return token_like(v)
    if op in ("=", ":=") and not m.group("sp"):
        # KEY=value (.env, shell, ini, URL query, CLI flag) ...
        if ident and text[m.end() : m.end() + 1] in (",", ")"):
            return False  # ... but not f(password=variable, ...)
        return True
    if key_quoted:
        # "password": 12345678 in JSON; d["password"] = variable is code
        return (v.isdigit() and len(v) >= 8) or token_like(v)
    if op == ":" and alone and len(v) >= 6 and not (v.istitle() or identifier_like(v)):
        return True  # YAML `password: hunter2x` (not a type annotation `token: Tensor`)
    return token_like(v)


def _owned_key(m: re.Match[str], text: str) -> bool:
    """A bare "key" only counts when named: api_key, secretKey, private-key, ..."""
    head = text[max(0, m.start() - 16) : m.start()].lower()
    return _KEY_OWNER_RE.search(head) is not None and _assignment(m, text)


def _weak_assignment(m: re.Match[str], text: str) -> bool:
    return _assignment(m, text, weak=True)


_ENV_HEAD_RE = re.compile(r"^[ \t]*(?:export[ \t]+|set[ \t]+|ENV[ \t]+)?[A-Z][A-Z0-9_]*$")


def _environment(m: re.Match[str], text: str) -> bool:
    v = m.group("val")
    if looks_placeholder(v) or (v.isdigit() and len(v) < 8) or REF_RE.match(v) or descriptive(v):
        return False
    head = line_before(text, m.start())
    if head is None or _ENV_HEAD_RE.match(head) is None:
        return False
    # .env / shell `NAME_KEY=value`; a spaced `NAME_KEY = "..."` is a code constant,
    # only a secret when the value looks generated.
    return not m.group("sp") or token_like(v.strip("\"'"))


# --------------------------------------------------------------------------------------
# credentials stated in prose: "password: hunter2", "my api key is sk-..."

_PROSE_OWNER_RE = re.compile(r"(?:^|[\s(])(?:my|our)[ \t]+(?:[a-z\-]+[ \t]+)?$")
_PROSE_DESCRIPTION_RE = re.compile(
    r"^(?:sha|md5|bcrypt|scrypt|argon|pbkdf|aes|rsa|hmac|utf|base64|\d+(?:[\-.]\d+)*(?:[\-]?[a-z]+)?$)",
)
_SENTENCE_END_RE = re.compile(r"[ \t]*(?:[.!;]|$|\n)")
_CODE_VALUE_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(?:\[|\.[A-Za-z_]|::|->)")


def _prose(m: re.Match[str], text: str) -> bool:
    """The value counts when it looks made up (a digit, an inner capital, a symbol) or is
    quoted, or, for a plain word, when a first-person owner discloses it at the end of a
    sentence ("my password is swordfish."); "the password is required" and "your password
    is too short" are descriptions and pass."""
    quoted = m.group("qv") is not None
    value = group_text(m, text, "qv" if quoted else "v")
    if not quoted:
        value = value.rstrip(".,;:!?)]")
    if len(value) < 4 or looks_placeholder(value, quoted) or descriptive(value):
        return False
    if _PROSE_DESCRIPTION_RE.match(value.lower()) or (not quoted and _CODE_VALUE_RE.match(value)):
        return False
    if quoted:
        return True
    inner = value[1:]
    if has_digit(value) or has_upper(inner) or any(c not in ALNUM for c in value):
        return True
    if not value.isalpha() or len(value) < 6:
        return False
    owner = _PROSE_OWNER_RE.search(window_before(text, m.start(), 40).lower()) is not None
    return owner and _SENTENCE_END_RE.match(text, m.end()) is not None


# --------------------------------------------------------------------------------------
# credentials in URLs and connection strings: scheme://user:password@host

_SCHEME_END_RE = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]{0,30}(?::[A-Za-z0-9]+)?$")
_URL_CRED_RE = re.compile(r"://(?P<user>[^\s:/?#@\[\]\"'<>]{0,256}):(?P<pw>[^\s/?#@\"'<>]{1,256})@(?=[A-Za-z0-9\[])")
_DB_NAMES = re.compile(
    r"(?:jdbc:)?(?:postgres(?:ql)?|mysql|mariadb|mongodb(?:\+srv)?|rediss?|valkey|amqps?|mssql|sqlserver"
    r"|oracle|cockroachdb|clickhouse|couchdb|neo4j(?:\+s)?|bolt|nats|kafka|mqtts?|memcached"
    r"|cassandra|snowflake|db2|postgis|timescale|influxdb|elasticsearch|opensearch)(?:\+[a-z0-9]+)?$",
    re.IGNORECASE,
)


def url_credentials(text: str) -> str | None:
    """ "connection-string" (a database URL) or "url-credentials" when a URL carries a
    password, else None."""
    for m in _URL_CRED_RE.finditer(text):
        scheme_m = _SCHEME_END_RE.search(text, max(0, m.start() - 40), m.start())
        if scheme_m is None:
            continue
        pw = m.group("pw")
        if looks_placeholder(pw) or (pw.isdigit() and not m.group("user")):
            continue
        return "connection-string" if _DB_NAMES.match(scheme_m.group(0)) else "url-credentials"
    return None


# --------------------------------------------------------------------------------------
# building a rule's check from its table entry

_FIXED: dict[str, Check] = {
    "jwt": _jwt,
    "bearer": _bearer,
    "azure-sas": _azure_sas,
    "endpoint-before": _endpoint_before,
    "connection-password": _connection_password,
    "assignment": _assignment,
    "assignment-weak": _weak_assignment,
    "owned-key": _owned_key,
    "prose": _prose,
    "environment": _environment,
    "mixed": lambda m, t: mixed_alnum(m.group(0)),
}


def _generated_body(skip: int, or_mixed: bool) -> Check:
    def check(m: re.Match[str], text: str) -> bool:
        body = m.group(0)[skip:]
        return alnum_with_digit(body) or (or_mixed and mixed_alnum(body))

    return check


def _head(pattern: str, width: int) -> Check:
    rx = re.compile(pattern + "$")

    def check(m: re.Match[str], text: str) -> bool:
        return rx.search(text, max(0, m.start() - width), m.start()) is not None

    return check


def build_check(entry: Mapping[str, Any]) -> Check | None:
    """The check a table entry names (None when it names none). ``generated-body``
    takes ``skip`` (the prefix's length) and ``or_mixed``; ``head`` takes the pattern
    the text right before the match must end with and its ``width``."""
    name = entry.get("check")
    if name is None:
        return None
    if name == "generated-body":
        return _generated_body(int(entry.get("skip", 0)), bool(entry.get("or_mixed", False)))
    if name == "head":
        return _head(str(entry["head"]), int(entry["width"]))
    return _FIXED[name]
