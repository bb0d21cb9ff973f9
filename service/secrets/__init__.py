"""Secret scanning: material that must never be stored (contract section 4).

A leaf room: it imports only `engram.models`. Its rules are data (`rules.toml`: about
sixty provider formats, context and assignment rules, the detect-secrets plugins it
runs, the placeholder vocabulary), compiled by a small matcher (`rules.py`) and run in
priority order by the scanner (`scanner.py`), with a high-entropy layer last
(`entropy.py`). Every answer is a rule id, never the matched value.

The engine refuses with :func:`refuse_secrets` (one value) and :func:`find_secret_each`
(a batch, each distinct string scanned once); its warm-up calls :func:`detector` so
that no call after ``/readyz`` pays the plugins' imports.
"""

from .plugins import DETECTOR_FAILED, DETECTOR_UNAVAILABLE
from .scanner import (
    SecretDetector,
    SecretRefused,
    detector,
    find_secret,
    find_secret_each,
    find_secret_in,
    refuse_secrets,
    rule_names,
    strings,
)

__all__ = [
    "DETECTOR_FAILED",
    "DETECTOR_UNAVAILABLE",
    "SecretDetector",
    "SecretRefused",
    "detector",
    "find_secret",
    "find_secret_each",
    "find_secret_in",
    "refuse_secrets",
    "rule_names",
    "strings",
]
