"""The last layer: long random-looking tokens that no named rule recognises.

A base64 or base64url run counts when it mixes upper case, lower case and digits and
its Shannon entropy clears a length-dependent threshold; a hex run when it mixes letters
and digits above its own. What only looks random is let through: content digests
(``sha256:<hex>``, this service's own form) and other labelled digests, UUIDs, this
service's record ids, git object ids, ids in a URL's path, PEM blocks that are not
private keys, identifiers (camelCase, snake_case) and chains of markers as science
writes them (``CD4+CD25hiCD127lo-Foxp3+``).
"""

from __future__ import annotations

import re

from .shapes import before, has_digit, identifier_like, mixed_alnum, phenotype_like
from .shapes import entropy as shannon

#: Rule ids this layer answers.
TOKEN = "high-entropy-token"
HEX = "high-entropy-hex"

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

#: The shortest run any later check uses.
RUN_MIN = 20
#: Runs of base64/base64url characters.
RUN_RE = re.compile(rf"[A-Za-z0-9+/_\-]{{{RUN_MIN},8192}}={{0,2}}")
_HEX_IN_RUN_RE = re.compile(r"(?<![A-Za-z0-9])[0-9a-fA-F]{32,1024}(?![A-Za-z0-9])")

_B64_MIN_LEN = 24


def _b64_threshold(n: int) -> float:
    """Entropy a base64 string of length n must reach (random ones sit just below log2(n))."""
    return min(3.9 + (n - 24) * 0.025, 4.5)


def _hex_threshold(n: int) -> float:
    return 3.2 if n < 48 else 3.4


def _labelled(text: str, start: int) -> bool:
    return _DIGEST_LABEL_RE.search(text, max(0, start - 24), start) is not None


def _b64_secret(core: str) -> bool:
    n = len(core)
    if n < _B64_MIN_LEN or not mixed_alnum(core):
        return False
    if _UUID_RE.search(core) or _RECORD_ID_RE.match(core):
        return False
    if shannon(core) < _b64_threshold(n):
        return False
    return not (identifier_like(core) or phenotype_like(core))


def _in_url_path(text: str, start: int) -> bool:
    """Whether position `start` lies in the path of a URL (not its query or fragment):
    document and commit ids there are addresses, not secrets."""
    lo = max(0, start - 2048)
    head = text[lo:start]
    cut = max((head.rfind(c) for c in " \t\r\n\"'<>()[]{}`"), default=-1)
    token = head[cut + 1 :]
    i = token.find("://")
    return i >= 0 and not any(c in token[i:] for c in "?#=&@")


def high_entropy(text: str, runs: list[re.Match[str]]) -> str | None:
    """:data:`TOKEN` or :data:`HEX` when one of `runs` (the text's :data:`RUN_RE`
    matches) looks generated, else None."""
    if not runs:
        return None
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
                return TOKEN
    for m in runs:
        if len(m.group(0)) < 32:
            continue
        for h in _HEX_IN_RUN_RE.finditer(text, m.start(), m.end()):
            run = h.group(0)
            if not (has_digit(run) and any(c.isalpha() for c in run)):
                continue
            if len(run) == 32 and _UUID_HEX_RE.match(run):
                continue  # a UUID written without dashes
            if len(run) == 40 or before(text, h.start(), frozenset("/")):
                continue  # a git object id, or an id in a path
            # the label first: this service's own digests ("sha256:<hex>") stop there
            if _labelled(text, h.start()) or _in_url_path(text, h.start()):
                continue
            if shannon(run) < _hex_threshold(len(run)):
                continue
            return HEX
    return None
