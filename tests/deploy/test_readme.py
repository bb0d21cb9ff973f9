"""The README's error-code table is generated from models/codes.py and kept in sync."""

from __future__ import annotations

import re
from pathlib import Path

from engram.models.codes import ErrorCode, reference_table

README = Path(__file__).resolve().parents[2] / "README.md"


def test_error_code_table_matches_models_codes():
    text = README.read_text(encoding="utf-8")
    block = re.search(r"<!-- error-codes:begin[^>]*-->\n(.*?)\n<!-- error-codes:end -->", text, re.S)
    assert block is not None, "README lost its error-code markers"
    assert block.group(1) == reference_table(), "regenerate the README table from models/codes.py"
    assert all(f"`{code.value}`" in block.group(1) for code in ErrorCode)
