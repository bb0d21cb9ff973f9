"""Secret detection for contract section 4: material that must never be stored.

`find_secret(text)` returns the *name* of the first rule that matches (for example
``"aws-access-key"`` or ``"pem-private-key"``) or ``None``. It never returns, logs or
keeps the matched value: callers refuse the material with the constant
``ErrorCode.SECRET_DETECTED`` and may record only the rule name.

Layers, cheapest and most specific first:

1. Provider key prefixes and fixed formats (AWS, GitHub, GitLab, Slack, Stripe, OpenAI,
   Anthropic, Google, Twilio, SendGrid, npm, PyPI, Azure, Heroku, ...), PEM/OpenSSH/PGP
   private keys.
2. Context rules: JWTs, ``Authorization`` headers and bearer tokens, cookies, URLs and
   connection strings with embedded credentials, and password/secret/token/api-key
   assignments as written in ``.env`` files, shells, JSON, YAML, INI and code.
3. detect-secrets' regex plugins (the provider detectors it ships), driven in-process
   through ``plugin.analyze_string``: no files, no global settings, no network
   verification. Its keyword, base64/hex entropy and public-IP plugins are *not* used:
   on prose and code they are far too noisy, and layers 2 and 4 cover their ground.
4. High-entropy tokens: long mixed-case base64/base64url runs and long hex runs whose
   Shannon entropy is above a length-dependent threshold. Content digests written
   ``sha256:<hex>`` (this service's own form) and other labelled digests, UUIDs,
   this service's ``mem_`` record ids and camelCase/snake_case identifiers are not
   flagged.

Loading: the patterns are compiled at import; detect-secrets' plugins are imported and
started once per process, by :func:`detector` (a :class:`SecretDetector`), which the
engine's warm-up calls so that no call after ``/readyz`` pays them. A plugin that
cannot start leaves the detector unable to judge: it then refuses every text.

Speed: every pattern starts with a literal (so the
regex engine's fast prefix scan does the work) and is run on the text or on an
ASCII-lowered copy of the same length instead of using IGNORECASE; left word
boundaries are checked in Python on the (rare) candidate matches rather than with
look-behinds; detect-secrets plugins only run when a cheap gate says they could match.
All repetitions are bounded, so the scan is linear in the input.
"""

from __future__ import annotations

import base64
import binascii
import functools
import json
import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from engram.models.codes import ContractError, ErrorCode

__all__ = [
    "DETECTOR_FAILED",
    "DETECTOR_UNAVAILABLE",
    "SecretDetector",
    "detector",
    "find_secret",
    "find_secret_each",
    "find_secret_in",
    "refuse_secrets",
    "rule_names",
]


# --------------------------------------------------------------------------------------
# helpers


def _entropy(s: str) -> float:
    """Shannon entropy in bits per character."""
    n = len(s)
    if n == 0:
        return 0.0
    counts: dict[str, int] = {}
    for ch in s:
        counts[ch] = counts.get(ch, 0) + 1
    return -sum((c / n) * math.log2(c / n) for c in counts.values())


def _has_digit(s: str) -> bool:
    return any("0" <= c <= "9" for c in s)


def _has_upper(s: str) -> bool:
    return any("A" <= c <= "Z" for c in s)


def _has_lower(s: str) -> bool:
    return any("a" <= c <= "z" for c in s)


def _mixed_alnum(s: str) -> bool:
    """Upper, lower and digit all present: what generated keys look like, words don't."""
    return _has_digit(s) and _has_upper(s) and _has_lower(s)


def _alnum_with_digit(s: str) -> bool:
    return _has_digit(s) and (_has_upper(s) or _has_lower(s))


_WORDCH = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")
_ALNUM = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")
_LETTERS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")

_ASCII_LOWER = {c: c + 32 for c in range(ord("A"), ord("Z") + 1)}


def _before(text: str, i: int, chars: frozenset[str]) -> bool:
    """True when the character before position i is in `chars`."""
    return i > 0 and text[i - 1] in chars


def _line_before(text: str, i: int, limit: int = 512) -> str | None:
    """The text between the start of the line and position i; None when the line is
    longer than `limit` (callers then judge only what is in reach)."""
    lo = max(0, i - limit)
    nl = text.rfind("\n", lo, i)
    if nl >= 0:
        return text[nl + 1 : i]
    return text[:i] if lo == 0 else None


def _window_before(text: str, i: int, limit: int = 512) -> str:
    head = _line_before(text, i, limit)
    return text[max(0, i - limit) : i] if head is None else head


Check = Callable[[re.Match[str], str], bool]


@dataclass(frozen=True, slots=True)
class _Rule:
    name: str
    pattern: re.Pattern[str]
    lower: bool  # matched against the ASCII-lowered copy (same offsets)
    boundary: frozenset[str] | None  # the char before the match must not be in this set
    check: Check | None  # extra test on (match, original text)
    triggers: tuple[str, ...]  # lower-case literals, one of which every match contains


def _literal_prefix(pattern: str) -> str:
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


def _r(
    name: str,
    pattern: str,
    *,
    lower: bool = False,
    boundary: frozenset[str] | None = _WORDCH,
    check: Check | None = None,
    triggers: tuple[str, ...] | None = None,
) -> _Rule:
    if triggers is None:
        prefix = _literal_prefix(pattern)
        if len(prefix) < 2:  # pragma: no cover - a rule-table error, caught at import
            raise ValueError(f"rule {name!r} needs explicit triggers")
        triggers = (prefix.lower(),)
    return _Rule(name, re.compile(pattern), lower, boundary, check, triggers)


def _g(m: re.Match[str], text: str, group: str | int = 0) -> str:
    """A group of a match, read from the original text (the match may be on the lowered copy)."""
    s, e = m.span(group)
    return text[s:e] if s >= 0 else ""


_E = r"(?![A-Za-z0-9_])"  # right boundary


# --------------------------------------------------------------------------------------
# layer 1: provider key prefixes and fixed formats

_RE_32HEX_END = re.compile(r"(?<![A-Za-z0-9_])[0-9a-f]{32}$")
_RE_AZURE_AD_HEAD = re.compile(r"(?<![A-Za-z0-9_~.\-])[A-Za-z0-9_~.\-]{3}\d$")
_RE_TELEGRAM_HEAD = re.compile(r"(?<![A-Za-z0-9_])\d{8,10}$")


def _tail_matches(rx: re.Pattern[str], width: int) -> Check:
    def check(m: re.Match[str], text: str) -> bool:
        return rx.search(text, max(0, m.start() - width), m.start()) is not None

    return check


_PREFIX_RULES: list[_Rule] = [
    # Private keys (public keys and certificates are fine to keep).
    _r("pem-private-key", r"-----BEGIN[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----", boundary=None),
    _r("putty-private-key", r"PuTTY-User-Key-File-[23]:", boundary=None),
    _r("age-secret-key", r"AGE-SECRET-KEY-1[02-9AC-HJ-NP-Z]{58}"),
    # AWS access key ids (AKIA long-term, ASIA temporary, ...).
    _r(
        "aws-access-key",
        r"(?:AKIA|ASIA|ABIA|ACCA|A3T[A-Z0-9])[0-9A-Z]{16}" + _E,
        triggers=("akia", "asia", "abia", "acca", "a3t"),
    ),
    # GitHub
    _r("github-token", r"gh[pousr]_[A-Za-z0-9]{36,255}" + _E),
    _r("github-fine-grained-pat", r"github_pat_[A-Za-z0-9_]{40,255}"),
    # GitLab
    _r("gitlab-token", r"gl(?:pat|dt|ft|soat|rt|cbt|imt|ptt|oas|agent)-[A-Za-z0-9_\-]{20,1024}"),
    _r("gitlab-runner-token", r"GR1348941[A-Za-z0-9_\-]{20,50}"),
    # Slack
    _r("slack-token", r"xox[abposer]-[A-Za-z0-9\-]{10,250}"),
    _r("slack-app-token", r"xapp-\d-[A-Z0-9]{8,}-\d{6,}-[a-f0-9]{32,}"),
    _r(
        "slack-webhook",
        r"hooks\.slack\.com/(?:services|workflows|triggers)/T[A-Za-z0-9_]{6,}/[A-Za-z0-9_]{6,}/[A-Za-z0-9_]{10,}",
        boundary=None,
    ),
    # Stripe (publishable pk_ keys are public by design and are not flagged)
    _r("stripe-key", r"sk_(?:live|test)_[A-Za-z0-9]{16,255}"),
    _r("stripe-key", r"rk_(?:live|test)_[A-Za-z0-9]{16,255}"),
    _r("stripe-webhook-secret", r"whsec_[A-Za-z0-9+/]{24,}"),
    # Anthropic before OpenAI: both start with "sk-".
    _r("anthropic-api-key", r"sk-ant-(?:api|admin|sid|oat|ort)\d{2}-[A-Za-z0-9_\-]{20,255}"),
    _r("anthropic-api-key", r"sk-ant-[A-Za-z0-9_\-]{30,255}"),
    _r("openai-api-key", r"sk-[A-Za-z0-9_\-]{0,80}T3BlbkFJ[A-Za-z0-9_\-]{16,}"),
    _r(
        "openai-api-key",
        r"sk-(?:proj|svcacct|admin|None)-[A-Za-z0-9_\-]{32,255}",
        check=lambda m, t: _alnum_with_digit(m.group(0)[8:]),
    ),
    # Legacy "sk-" + 32..64 alphanumerics (OpenAI, DeepSeek, ...): only generated-looking
    # bodies, so "sk-learn"-style words never match.
    _r("openai-api-key", r"sk-[A-Za-z0-9]{32,64}" + _E, check=lambda m, t: _alnum_with_digit(m.group(0)[3:])),
    # Google
    _r("google-api-key", r"AIza[0-9A-Za-z_\-]{35}" + _E),
    _r("google-oauth-client-secret", r"GOCSPX-[A-Za-z0-9_\-]{28}"),
    _r("google-oauth-token", r"ya29\.[0-9A-Za-z_\-]{30,}"),
    _r("google-refresh-token", r"1//0[0-9A-Za-z_\-]{40,}"),
    # Twilio
    _r("twilio-api-key", r"SK[0-9a-fA-F]{32}" + _E),
    _r("twilio-account-sid", r"AC[0-9a-f]{32}" + _E),
    # Mail
    _r("sendgrid-api-key", r"SG\.[A-Za-z0-9_\-]{16,32}\.[A-Za-z0-9_\-]{30,64}"),
    _r("mailgun-api-key", r"key-[0-9a-f]{32}" + _E),
    _r("mailchimp-api-key", r"-us\d{1,2}" + _E, boundary=None, check=_tail_matches(_RE_32HEX_END, 33)),
    # Package registries
    _r("npm-token", r"npm_[A-Za-z0-9]{36}" + _E),
    _r("pypi-token", r"pypi-AgE[A-Za-z0-9_\-]{50,}"),
    _r("rubygems-api-key", r"rubygems_[0-9a-f]{48}" + _E),
    _r("docker-hub-pat", r"dckr_pat_[A-Za-z0-9_\-]{20,}"),
    # Azure
    _r("azure-storage-key", r"AccountKey=[A-Za-z0-9+/]{86}==", boundary=None),
    _r(
        "azure-sas-token",
        r"sig=[A-Za-z0-9%+/]{30,}",
        boundary=None,
        check=lambda m, t: _before(t, m.start(), frozenset("?&")) and ("sv=" in t or "se=" in t),
    ),
    _r(
        "azure-ad-client-secret",
        r"Q~[A-Za-z0-9_~.\-]{31,34}" + _E,
        boundary=None,
        check=_tail_matches(_RE_AZURE_AD_HEAD, 5),
    ),
    # Heroku: prefixed tokens, or a UUID assigned to a heroku key/token.
    _r("heroku-api-key", r"HRKU-[A-Za-z0-9_\-]{40,}"),
    _r(
        "heroku-api-key",
        r"heroku[a-z0-9_ .\-]{0,24}(?:key|token|auth|password)[\"']?[ \t]*[:=][ \t]*[\"']?"
        r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",
        lower=True,
        boundary=None,
    ),
    # Other providers with self-identifying prefixes.
    _r("digitalocean-token", r"do[opr]_v1_[a-f0-9]{64}" + _E),
    _r("shopify-token", r"shp(?:at|ss|ca|pa)_[a-fA-F0-9]{32}" + _E),
    _r(
        "huggingface-token",
        r"hf_[A-Za-z0-9]{34,40}" + _E,
        check=lambda m, t: _alnum_with_digit(m.group(0)[3:]) or _mixed_alnum(m.group(0)[3:]),
    ),
    _r("databricks-token", r"dapi[a-h0-9]{32}(?:-\d)?" + _E),
    _r("square-token", r"sq0(?:atp|csp|idp)-[0-9A-Za-z_\-]{22,43}"),
    _r("square-token", r"EAAA[A-Za-z0-9_\-]{60}" + _E),
    _r("facebook-access-token", r"EAA[A-Za-z0-9]{100,}"),
    _r(
        "telegram-bot-token",
        r":AA[A-Za-z0-9_\-]{33}" + _E,
        boundary=None,
        check=_tail_matches(_RE_TELEGRAM_HEAD, 11),
    ),
    _r("atlassian-api-token", r"ATATT3[A-Za-z0-9_\-=]{150,}"),
    _r("linear-api-key", r"lin_api_[A-Za-z0-9]{40}" + _E),
    _r("notion-token", r"ntn_[A-Za-z0-9]{40,46}" + _E, check=lambda m, t: _mixed_alnum(m.group(0))),
    _r("notion-token", r"secret_[A-Za-z0-9]{43}" + _E, check=lambda m, t: _mixed_alnum(m.group(0))),
    _r("planetscale-token", r"pscale_(?:tkn|pw|oauth)_[A-Za-z0-9_\-=.]{32,64}"),
    _r("postman-api-key", r"PMAK-[a-f0-9]{24}-[a-f0-9]{34}" + _E),
    _r("grafana-token", r"gl(?:c|sa)_[A-Za-z0-9+/=_]{32,}"),
    _r("sentry-token", r"sntr[ysu]_[A-Za-z0-9+/=_]{40,}"),
    _r("new-relic-key", r"NRAK-[A-Z0-9]{27}" + _E),
    _r("vault-token", r"hv[sbr]\.[A-Za-z0-9_\-]{24,}"),
    _r("doppler-token", r"dp\.(?:pt|st|sa|ct|scim|audit)\.[A-Za-z0-9]{40,44}"),
    _r("replicate-token", r"r8_[A-Za-z0-9]{37}" + _E),
    _r("groq-api-key", r"gsk_[A-Za-z0-9]{48,52}" + _E),
    _r("xai-api-key", r"xai-[A-Za-z0-9]{70,90}" + _E),
    _r(
        "discord-webhook",
        r"discord(?:app)?\.com/api/webhooks/\d{10,20}/[A-Za-z0-9_\-]{40,}",
        boundary=None,
    ),
]


# --------------------------------------------------------------------------------------
# layer 2: JWTs, headers, cookies, credentials in URLs and connection strings,
# assignments.

_B64URL = r"[A-Za-z0-9_\-]"


def _jwt_ok(m: re.Match[str], text: str) -> bool:
    head = m.group(0).split(".", 1)[0]
    try:
        raw = base64.urlsafe_b64decode(head + "=" * (-len(head) % 4))
        obj = json.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError, binascii.Error):
        # A truncated header with two more segments still has the shape of a JWT.
        return True
    return isinstance(obj, dict)


_PLACEHOLDER_VALUES = frozenset(
    {
        "none",
        "null",
        "nil",
        "true",
        "false",
        "undefined",
        "empty",
        "required",
        "optional",
        "string",
        "str",
        "text",
        "bytes",
        "int",
        "bool",
        "secret",
        "secrets",
        "password",
        "passwords",
        "token",
        "tokens",
        "value",
        "redacted",
        "removed",
        "hidden",
        "masked",
        "omitted",
        "example",
        "dummy",
        "placeholder",
        "your_password",
        "yourpassword",
        "your-password",
        "your_token",
        "your-token",
        "your_api_key",
        "your-api-key",
        "api_key",
        "apikey",
        "secret_key",
        "xxx",
        "todo",
        "tbd",
        "n/a",
        "unset",
        "default",
        "env",
        "environ",
        "sensitive",
    }
)

_MASK_RE = re.compile(r"^(?:[*xX•.#?_\-]+|<[^>]*>|\[[^\]]*\]|\{[^}]*\}|%[^%]*%)$")
_REF_RE = re.compile(r"^(?:[A-Za-z_][A-Za-z0-9_]*)(?:(?:\.|::|->)[A-Za-z_][A-Za-z0-9_]*)+$")


def _looks_placeholder(v: str, quoted: bool = False) -> bool:
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
_SNAKE_WORDS_RE = re.compile(r"^[A-Za-z]{2,}[0-9]{0,2}(?:[_\-][A-Za-z]{2,}[0-9]{0,2})+$")


def _token_like(v: str) -> bool:
    """An unquoted value in a prose- or code-like position: only what looks generated
    counts, not words, identifiers or expressions."""
    if len(v) < 8 or not _TOKEN_CHARS_RE.match(v) or _REF_RE.match(v):
        return False
    if _SNAKE_WORDS_RE.match(v) or _identifier_like(v):
        return False
    if _alnum_with_digit(v):
        return True
    symbols = sum(c not in _ALNUM for c in v)
    if symbols >= 2 and _has_lower(v) and _has_upper(v):
        return True
    return _has_upper(v) and _has_lower(v) and _entropy(v) >= 3.5 and not v.istitle()


# Quoted values that describe a secret rather than being one: "hf_...", "your-api-key",
# "<token>", "MISSING", "example-password".
_DESCRIPTIVE_RE = re.compile(
    r"\.\.\.|…|^(?:your|my|insert|enter|replace|change|put|paste|add|some|the)[ _\-]|example|sample"
    r"|(?:^|[_\-. ])(?:api[_\-]?key|key|token|secret|password|passwd|pass|credentials?)(?:$|[_\-. ])"
)
_IDENT_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SECRET_WORD_RE = re.compile(r"pass|pwd|secret|token|key|auth|cred|sess|dsn|conn")


def _variable_name(v: str, keyword: str) -> bool:
    """An identifier value that names a secret ("db_password", "authKey", "token")."""
    low = v.lower()
    if not _SECRET_WORD_RE.search(low):
        return False
    camel = any(a.islower() and b.isupper() for a, b in zip(v, v[1:]))
    return "_" in v or camel or low.endswith(keyword)


def _descriptive(v: str) -> bool:
    low = v.lower()
    if _DESCRIPTIVE_RE.search(low):
        return True
    if _SNAKE_WORDS_RE.match(v) and not _has_digit(v) and _SECRET_WORD_RE.search(low):
        return True  # "mcp-session-id", "x_auth_token": a name, not a value
    letters = [c for c in v if c.isalpha()]
    return bool(letters) and len(letters) == len(v) and v.isupper()  # "MISSING", "NONE"


# Keywords naming a secret. The key must END with one (so "password_reset_url" or
# "token_count" never count), right before an optional quote and the operator. One
# literal-led pattern per keyword family (the regex engine's prefix scan makes each a
# fast pass); they run on the lowered copy.
_ASSIGN_TAIL = (
    r"(?P<kq>[\"'`]?)\]?(?P<sp>[ \t]*)"
    r"(?P<op>:=|=>|->|=(?!=)|:(?![:/]))[ \t]*"
    r"(?:(?P<vq>[\"'`])(?P<qval>[^\"'`\r\n]{1,512}?)(?P=vq)|(?P<val>[^\s\"'`,;&)\]}]{1,512}))"
)
_KEY_OWNER_RE = re.compile(
    r"(?:secret|private|signing|encryption|master|api|access|auth|client|app|account|service"
    r"|license|subscription|consumer|storage|session|webhook|x-api)[_\-. ]?$"
)
_ASSIGN_KEYWORDS: list[tuple[str, frozenset[str] | None, bool, bool]] = [
    # (keyword pattern, left boundary, "key" needs an owner word, weak keyword)
    (r"pass(?:word|wd|phrase|code)", None, False, False),
    (r"pass", _LETTERS, False, True),
    (r"pwd", _LETTERS, False, False),
    (r"secret", None, False, False),
    (r"key", None, True, False),
    (r"token", None, False, False),
    (r"credentials?", None, False, False),
    (r"sess(?:ionid|id|ion[_\-]?(?:id|token|cookie))", None, False, False),
    (r"conn(?:ection)?[_\-]?str(?:ing)?", None, False, False),
    (r"dsn", _LETTERS, False, True),
]
_YAML_HEAD_RE = re.compile(r"^[ \t]*(?:export[ \t]+|set[ \t]+|-[ \t]+)?[\"']?[A-Za-z0-9_.\-]*$")
_LINE_END_RE = re.compile(r"[ \t]*(?:#.*)?(?:\r?\n|$)")


def _assignment_ok(m: re.Match[str], text: str, weak: bool = False) -> bool:
    key_quoted = bool(m.group("kq")) or _before(text, m.start(), frozenset("\"'`"))
    op = m.group("op")
    head = _line_before(text, m.start())
    alone = head is not None and _YAML_HEAD_RE.match(head) is not None and _LINE_END_RE.match(text, m.end()) is not None
    if m.group("qval") is not None:
        v = _g(m, text, "qval")
        if len(v) < 4 or _looks_placeholder(v, quoted=True) or _descriptive(v):
            return False
        if " " in v.strip():
            # UI strings and messages, unless the words hide a generated value
            return _token_like(v.replace(" ", ""))
        if weak:
            return _token_like(v) or (alone and len(v) >= 6)
        if key_quoted or op in ("=", ":=", "=>"):
            # "password": "..." (JSON) or password = "..." (code): a literal secret.
            return True
        # `password: "x"` with a bare key: YAML when alone on its line, else a quotation.
        return (alone and len(v) >= 6) or _token_like(v)
    v = _g(m, text, "val")
    if len(v) < 4 or _looks_placeholder(v) or (v.isdigit() and len(v) < 8):
        return False
    if _REF_RE.match(v) or _descriptive(v) or "[" in v:
        return False  # settings.KEY, "your-key", auth[1], Annotated[...]
    ident = _IDENT_RE.match(v) is not None
    if ident and _variable_name(v, m.group(0)[: m.start("kq") - m.start()]):
        return False  # unk_token=unk_token, password=db_password: a variable, not a value
    if weak:
        return _token_like(v)
    if op in ("=", ":=") and not m.group("sp"):
        # KEY=value (.env, shell, ini, URL query, CLI flag) ...
        if ident and text[m.end() : m.end() + 1] in (",", ")"):
            return False  # ... but not f(password=variable, ...)
        return True
    if key_quoted:
        # "password": 12345678 in JSON; d["password"] = variable is code
        return (v.isdigit() and len(v) >= 8) or _token_like(v)
    if op == ":" and alone and len(v) >= 6 and not (v.istitle() or _identifier_like(v)):
        return True  # YAML `password: hunter2x` (not a type annotation `token: Tensor`)
    return _token_like(v)


def _owned_key_ok(m: re.Match[str], text: str) -> bool:
    """A bare "key" only counts when named: api_key, secretKey, private-key, ..."""
    head = text[max(0, m.start() - 16) : m.start()].lower()
    return _KEY_OWNER_RE.search(head) is not None and _assignment_ok(m, text)


def _weak_assignment_ok(m: re.Match[str], text: str) -> bool:
    return _assignment_ok(m, text, weak=True)


_ASSIGN_RULES: list[_Rule] = [
    _Rule(
        "secret-assignment",
        re.compile(kw + _ASSIGN_TAIL),
        True,
        boundary,
        _owned_key_ok if owned else _weak_assignment_ok if weak else _assignment_ok,
        (_literal_prefix(kw),),
    )
    for kw, boundary, owned, weak in _ASSIGN_KEYWORDS
]


# NAME_KEY=value style environment lines (generic "_KEY", "_AUTH", "_SALT" suffixes).
_ENV_RE = re.compile(
    r"_(?:KEY|TOKEN|SECRET|PASSWORD|PASS|PWD|PASSPHRASE|CREDENTIALS?|AUTH|SALT|PEPPER)"
    r"(?P<sp>[ \t]*)=[ \t]*[\"']?(?P<val>[^\s\"'#]{6,512})"
)
_ENV_HEAD_RE = re.compile(r"^[ \t]*(?:export[ \t]+|set[ \t]+|ENV[ \t]+)?[A-Z][A-Z0-9_]*$")


def _env_ok(m: re.Match[str], text: str) -> bool:
    v = m.group("val")
    if _looks_placeholder(v) or (v.isdigit() and len(v) < 8) or _REF_RE.match(v) or _descriptive(v):
        return False
    head = _line_before(text, m.start())
    if head is None or _ENV_HEAD_RE.match(head) is None:
        return False
    # .env / shell `NAME_KEY=value`; a spaced `NAME_KEY = "..."` is a code constant,
    # only a secret when the value looks generated.
    return not m.group("sp") or _token_like(v.strip("\"'"))


_SCHEME_END_RE = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]{0,30}(?::[A-Za-z0-9]+)?$")
_URL_CRED_RE = re.compile(r"://(?P<user>[^\s:/?#@\[\]\"'<>]{0,256}):(?P<pw>[^\s/?#@\"'<>]{1,256})@(?=[A-Za-z0-9\[])")
_DB_NAMES = re.compile(
    r"(?:jdbc:)?(?:postgres(?:ql)?|mysql|mariadb|mongodb(?:\+srv)?|rediss?|valkey|amqps?|mssql|sqlserver"
    r"|oracle|cockroachdb|clickhouse|couchdb|neo4j(?:\+s)?|bolt|nats|kafka|mqtts?|memcached"
    r"|cassandra|snowflake|db2|postgis|timescale|influxdb|elasticsearch|opensearch)(?:\+[a-z0-9]+)?$",
    re.IGNORECASE,
)


def _url_credentials(text: str) -> str | None:
    for m in _URL_CRED_RE.finditer(text):
        scheme_m = _SCHEME_END_RE.search(text, max(0, m.start() - 40), m.start())
        if scheme_m is None:
            continue
        pw = m.group("pw")
        if _looks_placeholder(pw) or (pw.isdigit() and not m.group("user")):
            continue
        return "connection-string" if _DB_NAMES.match(scheme_m.group(0)) else "url-credentials"
    return None


_CONN_HEAD_RE = re.compile(
    r"(?:server|data source|host|address|addr|endpoint|database|initial catalog|uid|user id|driver)"
    r"[ \t]*=[^;]*;",
)


def _conn_string_ok(m: re.Match[str], text: str) -> bool:
    if _looks_placeholder(_g(m, text, "pw")):
        return False
    return _CONN_HEAD_RE.search(_window_before(text, m.start()).lower()) is not None


_CONTEXT_RULES: list[_Rule] = [
    _r(
        "jwt",
        r"eyJ" + _B64URL + r"{8,4096}\." + _B64URL + r"{8,16384}\." + _B64URL + r"{0,4096}",
        boundary=frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-"),
        check=_jwt_ok,
    ),
    _r(
        "authorization-header",
        r"authori[sz]ation[\"']?[ \t]*[:=][ \t]*[\"']?(?:bearer|basic|token|digest|bot|apikey|sso-key"
        r"|dpop|aws4-hmac-sha256|hmac|negotiate|ntlm)[ \t]+[a-z0-9._~+/=\-:,]{8,}",
        lower=True,
    ),
    _r(
        "bearer-token",
        r"bearer[ \t]+(?P<tok>[a-z0-9._~+/\-]{16,}=*)",
        lower=True,
        boundary=_LETTERS,
        check=lambda m, t: _alnum_with_digit(_g(m, t, "tok")) and _entropy(_g(m, t, "tok")) >= 3.0,
    ),
    _r(
        "session-cookie",
        r"cookie[\"']?[ \t]*:[ \t]*[\"']?[a-z0-9_.\-]{1,64}=[^;\s\"']{6,}",
        lower=True,
        boundary=_ALNUM,
    ),
    _r(
        "session-cookie",
        r"document\.cookie[ \t]*=[ \t]*[\"'`][A-Za-z0-9_.\-]{1,64}=[^;\s\"'`]{6,}",
        boundary=None,
    ),
    _r(
        "connection-string",
        r"(?:password|pwd)[ \t]*=[ \t]*(?P<pw>[^;\s\"']{2,256})",
        lower=True,
        boundary=_LETTERS,
        check=_conn_string_ok,
        triggers=("password", "pwd"),
    ),
    *(
        _r(
            "connection-string",
            name + r"=[A-Za-z0-9+/%=]{20,}",
            boundary=None,
            check=lambda m, t: "Endpoint" in _window_before(t, m.start()),
        )
        for name in ("AccountKey", "SharedAccessKey", "SharedAccessSignature")
    ),
    _r("npm-auth-token", r"_auth(?:Token)?[ \t]*=[ \t]*[\"']?[A-Za-z0-9+/=_\-]{16,}", boundary=None),
    _r(
        "netrc-password",
        r"machine[ \t]+\S{1,256}[ \t]+login[ \t]+\S{1,256}[ \t]+password[ \t]+\S{2,256}",
        lower=True,
        boundary=_LETTERS,
    ),
]


# Credentials stated in prose: "password: hunter2", "the admin password is hunter2",
# "my api key is sk-...". The value counts when it looks made up (a digit, an inner
# capital, a symbol) or is quoted, or, for a plain word, when a first-person owner
# discloses it at the end of a sentence ("my password is swordfish."); "the password is
# required", "the password is hashed with bcrypt" and "your password is too short" are
# descriptions and pass.
_PROSE_CONNECTOR = (
    r"s?(?:[ \t]+(?:is|was)(?:[ \t]+(?:now|still|just|set[ \t]+to))?[ \t]*:?|[ \t]*:)[ \t]*"
    r"(?:(?P<q>[\"'`\u201c\u2018])(?P<qv>[^\"'`\u201d\u2019\r\n]{3,128}?)[\"'`\u201d\u2019]"
    r"|(?P<v>[^\s\"'`\u201c\u201d]{4,128}))"
)
_PROSE_OWNER_RE = re.compile(r"(?:^|[\s(])(?:my|our)[ \t]+(?:[a-z\-]+[ \t]+)?$")
_PROSE_DESCRIPTION_RE = re.compile(
    r"^(?:sha|md5|bcrypt|scrypt|argon|pbkdf|aes|rsa|hmac|utf|base64|\d+(?:[\-.]\d+)*(?:[\-]?[a-z]+)?$)",
)
_SENTENCE_END_RE = re.compile(r"[ \t]*(?:[.!;]|$|\n)")
_CODE_VALUE_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(?:\[|\.[A-Za-z_]|::|->)")


def _prose_ok(m: re.Match[str], text: str) -> bool:
    quoted = m.group("qv") is not None
    value = _g(m, text, "qv" if quoted else "v")
    if not quoted:
        value = value.rstrip(".,;:!?)]")
    if len(value) < 4 or _looks_placeholder(value, quoted) or _descriptive(value):
        return False
    if _PROSE_DESCRIPTION_RE.match(value.lower()) or (not quoted and _CODE_VALUE_RE.match(value)):
        return False
    if quoted:
        return True
    inner = value[1:]
    if _has_digit(value) or _has_upper(inner) or any(c not in _ALNUM for c in value):
        return True
    if not value.isalpha() or len(value) < 6:
        return False
    owner = _PROSE_OWNER_RE.search(_window_before(text, m.start(), 40).lower()) is not None
    return owner and _SENTENCE_END_RE.match(text, m.end()) is not None


_PROSE_RULES: list[_Rule] = [
    _r(
        "prose-credential",
        keyword + _PROSE_CONNECTOR,
        lower=True,
        boundary=_LETTERS,
        check=_prose_ok,
        triggers=triggers,
    )
    for keyword, triggers in (
        (r"pass(?:word|wd|phrase|code)", ("pass",)),
        (r"pwd", ("pwd",)),
        (r"api[ _\-]?key", ("api",)),
        (r"(?:access|secret)[ _\-]key", ("access", "secret")),
    )
]


_ENV_RULE = _Rule(
    "env-secret",
    _ENV_RE,
    False,
    None,
    _env_ok,
    ("_key", "_token", "_secret", "_pass", "_pwd", "_credential", "_auth", "_salt", "_pepper"),
)


# --------------------------------------------------------------------------------------
# layer 4: high-entropy tokens

# Labels after which a hex/base64 run is a digest or an identifier, not a secret:
# "sha256:<hex>" (this service's digests), "commit 3f2a...", "etag: ...", "id=...".
_DIGEST_LABEL_RE = re.compile(
    r"(?<![A-Za-z])(?:sha-?(?:1|224|256|384|512)|sha3-?\d{3}|md5|blake2[bs]?|blake3|xxh\d*|crc32|digest"
    r"|hash|checksum|commit|rev|revision|etag|fingerprint|integrity|sum|oid|object|tree|parent|id|uuid"
    r"|ssh-(?:rsa|dss|ed25519)|ecdsa-sha2-nistp\d{3}|sk-ssh-ed25519@openssh\.com|base64,)"
    r"[\"']?[ \t]*[:=#@\-]?[ \t]*[\"']?$",
    re.IGNORECASE,
)
# PEM blocks other than private keys (certificates, public keys, CSRs): public by design.
_PEM_BLOCK_RE = re.compile(r"-----BEGIN ([A-Z0-9 ]{1,40})-----[\s\S]{0,65536}?-----END \1-----")
_UUID_RE = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_UUID_HEX_RE = re.compile(r"[0-9a-fA-F]{12}[1-8][0-9a-fA-F]{3}[89abAB][0-9a-fA-F]{15}$")
_RECORD_ID_RE = re.compile(r"(?:mem|cand|cap|evt|rcpt|ev|cit)_[a-z2-7]{16,}$")

# Runs of base64/base64url characters. 20 is the shortest length any later check uses.
_RUN_RE = re.compile(r"[A-Za-z0-9+/_\-]{20,8192}={0,2}")
_HEX_IN_RUN_RE = re.compile(r"(?<![A-Za-z0-9])[0-9a-fA-F]{32,1024}(?![A-Za-z0-9])")
_SEP_RE = re.compile(r"[_\-]")

_B64_MIN_LEN = 24


def _b64_threshold(n: int) -> float:
    """Entropy a base64 string of length n must reach (random ones sit just below log2(n))."""
    return min(3.9 + (n - 24) * 0.025, 4.5)


def _hex_threshold(n: int) -> float:
    return 3.2 if n < 48 else 3.4


def _labelled(text: str, start: int) -> bool:
    return _DIGEST_LABEL_RE.search(text, max(0, start - 24), start) is not None


_PIECE_RE = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")
_VOWELS = frozenset("aeiouyAEIOUY")
_WORD_NUM_RE = re.compile(r"^(?:\d+|[A-Za-z]{2,}\d+|\d+[A-Za-z]{2,})$")


def _wordiness(core: str) -> float:
    """Share of characters in word-like pieces (3+ letters with a vowel, or an acronym)."""
    good = sum(
        len(p)
        for p in _PIECE_RE.findall(core)
        if len(p) >= 3 and p.isalpha() and (p.isupper() or any(c in _VOWELS for c in p))
    )
    return good / max(1, len(core))


def _identifier_like(core: str) -> bool:
    """camelCase / PascalCase / snake_case / kebab-case names ("Qwen2_5OmniDiTRotaryEmbedding",
    "Mistral-Small-4-119B-2603"): generated keys break into 1-2 letter fragments."""
    parts = [p for p in _SEP_RE.split(core) if p]
    if len(parts) > 1 and all(len(p) <= 4 or _WORD_NUM_RE.match(p) or _wordiness(p) >= 0.6 for p in parts):
        return True
    return _wordiness(core) >= 0.6


def _b64_secret(core: str) -> bool:
    n = len(core)
    if n < _B64_MIN_LEN or not _mixed_alnum(core):
        return False
    if _UUID_RE.search(core) or _RECORD_ID_RE.match(core):
        return False
    if _entropy(core) < _b64_threshold(n):
        return False
    return not _identifier_like(core)


def _in_url_path(text: str, start: int) -> bool:
    """Whether position `start` lies in the path of a URL (not its query or fragment):
    document and commit ids there are addresses, not secrets."""
    lo = max(0, start - 2048)
    head = text[lo:start]
    cut = max((head.rfind(c) for c in " \t\r\n\"'<>()[]{}`"), default=-1)
    token = head[cut + 1 :]
    i = token.find("://")
    return i >= 0 and not any(c in token[i:] for c in "?#=&@")


def _high_entropy(text: str, runs: list[re.Match[str]]) -> str | None:
    if not runs:
        return None
    public: list[tuple[int, int]] = []
    if "-----BEGIN " in text:
        public = [b.span() for b in _PEM_BLOCK_RE.finditer(text)]
        if public:
            runs = [m for m in runs if not any(a <= m.start() < b for a, b in public)]
    for m in runs:
        run = m.group(0)
        if _labelled(text, m.start()) or _in_url_path(text, m.start()):
            continue
        if text.startswith(("...", "…"), m.end()):
            continue  # a truncated example: "eyJhbGciOi..."
        # judge file and URL paths per segment; keep '/' inside padded base64 blobs
        segments = run.split("/") if "/" in run and not run.endswith("=") else (run,)
        for seg in segments:
            if _b64_secret(seg.rstrip("=")):
                return "high-entropy-token"
    for m in runs:
        if len(m.group(0)) < 32:
            continue
        for h in _HEX_IN_RUN_RE.finditer(text, m.start(), m.end()):
            run = h.group(0)
            if not (_has_digit(run) and any(c.isalpha() for c in run)):
                continue
            if len(run) == 32 and _UUID_HEX_RE.match(run):
                continue  # a UUID written without dashes
            if len(run) == 40 or _before(text, h.start(), frozenset("/")):
                continue  # a git object id, or an id in a path
            if _entropy(run) < _hex_threshold(len(run)):
                continue
            if _labelled(text, h.start()) or _in_url_path(text, h.start()):
                continue
            return "high-entropy-hex"
    return None


# --------------------------------------------------------------------------------------
# layer 3: detect-secrets' regex plugins


def _slug(s: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", s.lower()).strip("-")


class _Scan:
    """Per-call lazily computed views of one text."""

    __slots__ = ("text", "_low", "_runs")

    def __init__(self, text: str) -> None:
        self.text = text
        self._low: str | None = None
        self._runs: list[re.Match[str]] | None = None

    @property
    def low(self) -> str:
        if self._low is None:
            # ASCII-only lowering keeps every offset equal to the original's.
            self._low = self.text.translate(_ASCII_LOWER)
        return self._low

    @property
    def runs(self) -> list[re.Match[str]]:
        if self._runs is None:
            self._runs = list(_RUN_RE.finditer(self.text))
        return self._runs

    def longest_run(self) -> int:
        return max((len(m.group(0)) for m in self.runs), default=0)


Gate = Callable[[_Scan], bool]


def _rx_gate(pattern: str, lower: bool = False) -> Gate:
    rx = re.compile(pattern)
    if lower:
        return lambda s: rx.search(s.low) is not None
    return lambda s: rx.search(s.text) is not None


def _run_gate(n: int, extra: Gate | None = None) -> Gate:
    if extra is None:
        return lambda s: s.longest_run() >= n
    return lambda s: s.longest_run() >= n and extra(s)


def _any_gate(*gates: Gate) -> Gate:
    return lambda s: any(g(s) for g in gates)


_ALWAYS: Gate = lambda s: True  # noqa: E731


#: Rule names for a detector that cannot judge: the text is refused, never passed as clean.
DETECTOR_UNAVAILABLE = "detector-unavailable"
DETECTOR_FAILED = "detector-failed"


@dataclass(frozen=True)
class _Plugin:
    """One detect-secrets plugin, with the lower-case literals one of which must occur
    for it to match (None: no literal) and the cheap gate it runs behind."""

    name: str
    plugin: Any
    triggers: tuple[str, ...] | None
    gate: Gate


def _load_plugins() -> tuple[tuple[_Plugin, ...], str | None]:
    """detect-secrets' plugins, and the fault that leaves the detector unable to judge
    (None when every plugin started)."""
    try:
        from detect_secrets.plugins.artifactory import ArtifactoryDetector
        from detect_secrets.plugins.aws import AWSKeyDetector
        from detect_secrets.plugins.azure_storage_key import AzureStorageKeyDetector
        from detect_secrets.plugins.basic_auth import BasicAuthDetector
        from detect_secrets.plugins.cloudant import CloudantDetector
        from detect_secrets.plugins.discord import DiscordBotTokenDetector
        from detect_secrets.plugins.github_token import GitHubTokenDetector
        from detect_secrets.plugins.gitlab_token import GitLabTokenDetector
        from detect_secrets.plugins.ibm_cloud_iam import IbmCloudIamDetector
        from detect_secrets.plugins.ibm_cos_hmac import IbmCosHmacDetector
        from detect_secrets.plugins.jwt import JwtTokenDetector
        from detect_secrets.plugins.mailchimp import MailchimpDetector
        from detect_secrets.plugins.openai import OpenAIDetector
        from detect_secrets.plugins.private_key import PrivateKeyDetector
        from detect_secrets.plugins.pypi_token import PypiTokenDetector
        from detect_secrets.plugins.sendgrid import SendGridDetector
        from detect_secrets.plugins.slack import SlackDetector
        from detect_secrets.plugins.softlayer import SoftlayerDetector
        from detect_secrets.plugins.square_oauth import SquareOAuthDetector
        from detect_secrets.plugins.stripe import StripeDetector
        from detect_secrets.plugins.telegram_token import TelegramBotTokenDetector
        from detect_secrets.plugins.twilio import TwilioKeyDetector
    except Exception:  # detect-secrets is a declared dependency: without it, fail closed
        return (), DETECTOR_UNAVAILABLE
    # Each plugin runs only when its gate (a literal-led regex or a long-run test) says
    # it could match. This keeps the assignment-style plugins (whose patterns start with
    # a look-behind and are tried at every position) off ordinary text entirely.
    # NpmDetector is not used: its `//.+/:_authToken=` is quadratic on long URL-heavy
    # lines, and the npm-token / npm-auth-token rules above cover what it finds.
    spec: list[tuple[Any, tuple[str, ...] | None, Gate]] = [
        (PrivateKeyDetector, ("begin", "putty"), _any_gate(_rx_gate(r"BEGIN"), _rx_gate(r"PuTTY"))),
        (
            AWSKeyDetector,
            ("a3t", "abia", "acca", "akia", "asia", "aws"),
            _any_gate(_rx_gate(r"A(?:3T|BIA|CCA|KIA|SIA)"), _rx_gate(r"aws.{0,20}?(?:key|pw|pass|token)", lower=True)),
        ),
        (GitHubTokenDetector, ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"), _ALWAYS),
        (GitLabTokenDetector, ("gl", "gr1348941"), _rx_gate(r"gl[a-z]{1,6}-|GR1348941")),
        (SlackDetector, ("xox", "hooks.slack"), _ALWAYS),
        (StripeDetector, ("k_live_",), _ALWAYS),
        (OpenAIDetector, ("t3blbkfj",), _ALWAYS),
        (SendGridDetector, ("sg.",), _ALWAYS),
        (PypiTokenDetector, ("pypi-",), _ALWAYS),
        (AzureStorageKeyDetector, ("accountkey=",), _ALWAYS),
        (JwtTokenDetector, ("eyj",), _rx_gate(r"eyJ")),
        (BasicAuthDetector, ("://",), _ALWAYS),
        (TwilioKeyDetector, ("ac", "sk"), _any_gate(_rx_gate(r"AC[a-z0-9]{32}"), _rx_gate(r"SK[a-z0-9]{32}"))),
        (MailchimpDetector, ("-us",), _rx_gate(r"-us\d")),
        (DiscordBotTokenDetector, (".",), _run_gate(23, _rx_gate(r"\.[A-Za-z0-9_\-]{6}\.[A-Za-z0-9_\-]{27}"))),
        (TelegramBotTokenDetector, (":",), _run_gate(35, _rx_gate(r":[0-9A-Za-z_\-]{35}"))),
        (SquareOAuthDetector, ("sq0csp",), _ALWAYS),
        (ArtifactoryDetector, ("akc", "ap"), _rx_gate(r"AKC[a-zA-Z0-9]{10}|AP[\dA-F][a-zA-Z0-9]{8}")),
        (
            CloudantDetector,
            ("cl",),
            _rx_gate(r"cl(?:(?:oudant|ou)?[_\-]?(?:api)?(?:key|pwd|pw|pass|token)|oudant\.com)", lower=True),
        ),
        (
            IbmCloudIamDetector,
            ("key", "pwd", "pass", "token"),
            _run_gate(
                44,
                _rx_gate(r"(?:key|pwd|pass|token)[\"']?\]?[ \t]*(?:=|:|=>| +)[ \t]*[\"']?[a-z0-9_\-]{44}", lower=True),
            ),
        ),
        (IbmCosHmacDetector, ("secret",), _run_gate(48, _rx_gate(r"secret[_\-]?(?:access)?[_\-]?key", lower=True))),
        (SoftlayerDetector, ("sl",), _run_gate(64)),
    ]
    plugins: list[_Plugin] = []
    fault: str | None = None
    for cls, triggers, gate in spec:
        try:
            plugin = cls()
        except Exception:  # a plugin that cannot start leaves a hole: fail closed
            fault = DETECTOR_UNAVAILABLE
            continue
        plugins.append(_Plugin("ds-" + _slug(cls.secret_type), plugin, triggers, gate))
    return tuple(plugins), fault


# Extra sanity checks on what a plugin yields: Artifactory's "AP[0-9A-F]..." password
# form also fires on upper-case words ("APPLICATIONS"), Twilio's on lower-case prose.
_DS_EXTRA_CHECK: dict[str, Callable[[str], bool]] = {
    "ds-artifactory-credentials": lambda s: _alnum_with_digit(s.strip(' \t\r\n=:"')),
    "ds-basic-auth-credentials": lambda s: not _looks_placeholder(s),
    "ds-twilio-api-key": _has_digit,
    "ds-discord-bot-token": _mixed_alnum,
}


# --------------------------------------------------------------------------------------
# the detector

#: One rule (or plugin) run on a text: the rule name it matched, or None.
Step = Callable[[_Scan], "str | None"]


def _rule_hits(rule: _Rule, scan: _Scan) -> bool:
    text = scan.text
    subject = scan.low if rule.lower else text
    boundary = rule.boundary
    check = rule.check
    for m in rule.pattern.finditer(subject):
        if boundary is not None and _before(text, m.start(), boundary):
            continue
        if check is None or check(m, text):
            return True
    return False


def _rule_step(rule: _Rule) -> Step:
    return lambda scan: rule.name if _rule_hits(rule, scan) else None


def _url_step(scan: _Scan) -> str | None:
    return _url_credentials(scan.text)


def _plugin_step(p: _Plugin) -> Step:
    extra = _DS_EXTRA_CHECK.get(p.name)

    def step(scan: _Scan) -> str | None:
        if not p.gate(scan):
            return None
        try:
            for found in p.plugin.analyze_string(scan.text):
                if extra is None or extra(found):
                    return p.name
        except Exception:  # a plugin bug must not leak the text, nor pass it as clean
            return DETECTOR_FAILED
        return None

    return step


#: Characters that most text lacks: a literal holding one of them cannot occur in a text
#: without it, so the literals are grouped under the first of these they hold (their
#: guard), and a text tests a group's literals only when the guard occurs in it. Prose
#: holds few of them, and most literals hold one: the trigger pass then tests about half
#: as many literals, and finds exactly the ones a test of every literal finds.
_GUARDS = "_-.:/=~0123456789"
TriggerGroups = tuple[tuple[str, tuple[tuple[str, tuple[int, ...]], ...]], ...]


def _trigger_groups(steps: Sequence[tuple[tuple[str, ...], Step]]) -> TriggerGroups:
    """Each literal with the steps it enables, grouped under its guard."""
    by_literal: dict[str, tuple[int, ...]] = {}
    for i, (triggers, _) in enumerate(steps):
        for literal in triggers:
            by_literal[literal] = (*by_literal.get(literal, ()), i)
    groups: dict[str, list[tuple[str, tuple[int, ...]]]] = {}
    for literal, enabled in by_literal.items():
        guard = next((c for c in _GUARDS if c in literal), "")  # "": in every text
        groups.setdefault(guard, []).append((literal, enabled))
    return tuple((guard, tuple(members)) for guard, members in groups.items())


@dataclass(frozen=True)
class SecretDetector:
    """Every layer's rules in priority order, ready to scan one text at a time.

    Every step comes with the literals that must occur for it to match: a scan checks
    each distinct literal once (``in`` on the lowered text) and runs only the steps it
    enables, in order; the high-entropy scan always runs last. ``fault`` is the rule name
    every text is refused with when the detector cannot judge (a plugin that did not
    start). Built once per process by :func:`detector`.
    """

    plugins: tuple[_Plugin, ...]
    fault: str | None
    steps: tuple[tuple[tuple[str, ...], Step], ...] = field(init=False)
    trigger_groups: TriggerGroups = field(init=False)

    def __post_init__(self) -> None:
        steps = (
            [(r.triggers, _rule_step(r)) for r in _PREFIX_RULES]
            + [(r.triggers, _rule_step(r)) for r in _CONTEXT_RULES]
            + [(("://",), _url_step)]
            + [(r.triggers, _rule_step(r)) for r in _ASSIGN_RULES]
            + [(r.triggers, _rule_step(r)) for r in _PROSE_RULES]
            + [(_ENV_RULE.triggers, _rule_step(_ENV_RULE))]
            + [(p.triggers or ("",), _plugin_step(p)) for p in self.plugins]
        )
        object.__setattr__(self, "steps", tuple(steps))
        object.__setattr__(self, "trigger_groups", _trigger_groups(steps))

    @classmethod
    def load(cls) -> SecretDetector:
        """The rules with detect-secrets' plugins (about 0.1 s of imports)."""
        plugins, fault = _load_plugins()
        return cls(plugins, fault)

    @property
    def rule_names(self) -> tuple[str, ...]:
        """Every name :meth:`find` can answer."""
        return tuple(
            dict.fromkeys(
                [r.name for r in _PREFIX_RULES]
                + [r.name for r in _CONTEXT_RULES]
                + [r.name for r in _PROSE_RULES]
                + ["connection-string", "url-credentials", "secret-assignment", "env-secret"]
                + [p.name for p in self.plugins]
                + ["high-entropy-token", "high-entropy-hex", DETECTOR_UNAVAILABLE, DETECTOR_FAILED]
            )
        )

    def find(self, text: str) -> str | None:
        """The name of the first rule that matches (e.g. "aws-access-key",
        "pem-private-key"), or None. Never returns or logs the secret itself."""
        if not isinstance(text, str):
            raise TypeError("find_secret expects str")
        if self.fault is not None and text:
            return self.fault
        if len(text) < 8:
            return None
        try:
            return self._scan(text)
        except Exception:  # a rule bug fails closed: the text is refused, not passed
            return DETECTOR_FAILED

    def _scan(self, text: str) -> str | None:
        scan = _Scan(text)
        for i in sorted(self._enabled_steps(scan.low)):
            hit = self.steps[i][1](scan)
            if hit is not None:
                return hit
        return _high_entropy(text, scan.runs)

    def _enabled_steps(self, low: str) -> set[int]:
        """The steps whose literals occur in ``low`` (the lowered text)."""
        enabled: set[int] = set()
        for guard, members in self.trigger_groups:
            if guard in low:
                for literal, steps in members:
                    if literal in low:
                        enabled.update(steps)
        return enabled


@functools.cache
def detector() -> SecretDetector:
    """The process's detector, loaded on first use; the engine's warm-up asks for it, so
    no call after ``/readyz`` pays the plugins' imports."""
    return SecretDetector.load()


# --------------------------------------------------------------------------------------
# the public API


def rule_names() -> tuple[str, ...]:
    """Every rule name :func:`find_secret` can answer."""
    return detector().rule_names


def find_secret(text: str) -> str | None:
    """Return the name of the first rule that matches (e.g. "aws-access-key",
    "pem-private-key"), or None. Never returns or logs the secret itself."""
    return detector().find(text)


def find_secret_in(texts: Iterable[str]) -> str | None:
    """The first rule name matched by any of `texts` (None when all are clean)."""
    for t in texts:
        if isinstance(t, str):
            hit = find_secret(t)
            if hit is not None:
                return hit
    return None


def find_secret_each(values: Iterable[Any]) -> list[str | None]:
    """For each of `values`, what `refuse_secrets` would find in it: the first rule name
    matched by any of its strings (keys and values, however deeply nested), or None.

    Why: the records of one batch repeat most of their strings (every key, fixed values
    such as a purpose or a retention rule), so each distinct string is scanned once and
    its verdict reused; a verdict depends on the string alone, so the answers are the
    ones a scan of each value by itself gives."""
    verdicts: dict[str, str | None] = {}
    out: list[str | None] = []
    for value in values:
        hit = None
        for text in _strings(value):
            if text in verdicts:
                verdict = verdicts[text]
            else:
                verdict = verdicts[text] = find_secret(text)
            if verdict is not None:
                hit = verdict
                break
        out.append(hit)
    return out


def _strings(value: Any) -> list[str]:
    """Every string in ``value``, keys included, depth first in order (a key before its
    item). A list rather than a generator: a generator per nested member cost more than
    scanning the strings (bulk ingest examines hundreds of members a record)."""
    out: list[str] = []
    _collect_strings(value, out)
    return out


def _collect_strings(value: Any, out: list[str]) -> None:
    if isinstance(value, str):
        out.append(value)
    elif isinstance(value, dict):
        for key, item in value.items():
            _collect_strings(key, out)
            if type(item) is str:
                out.append(item)
            else:
                _collect_strings(item, out)
    elif isinstance(value, (list, tuple)):
        for item in value:
            if type(item) is str:
                out.append(item)
            else:
                _collect_strings(item, out)


def refuse_secrets(value: Any) -> None:
    """Contract section 4: raise SECRET_DETECTED when any string in `value` (keys and
    values, however deeply nested) looks like a secret, or the detector cannot judge.
    Callers pass everything the service would keep (journal reasons, locators, refs),
    before any write."""
    if find_secret_in(_strings(value)) is not None:
        raise ContractError(ErrorCode.SECRET_DETECTED)
