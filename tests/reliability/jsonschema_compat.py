"""Make hypothesis-jsonschema 0.23 work with the installed Hypothesis (6.170).

hypothesis-jsonschema's object strategy drives Hypothesis's private
`conjecture.utils.many` through the old `more()`/`reject()` protocol, which Hypothesis
6.17x replaced with a context-manager protocol. This shim gives the library, and only
the library (its module-level `cu` name), an object with the old protocol. Test-only.
"""

from __future__ import annotations

import types
from typing import Any

import hypothesis_jsonschema._from_schema as _fs
from hypothesis.internal.conjecture import utils as _cu


class _OldMany:
    def __init__(self, data: Any, min_size: int, max_size: float, average_size: float) -> None:
        self.data, self.min_size, self.max_size = data, min_size, max_size
        self.p_continue = _cu._calc_p_continue(average_size - min_size, max_size - min_size)
        self.count = 0
        self.rejections = 0

    def more(self) -> bool:
        if self.count < self.min_size:
            go = True
        elif self.count >= self.max_size:
            go = False
        else:
            go = self.data.draw_boolean(self.p_continue)
        if go:
            self.count += 1
        return go

    def reject(self) -> None:
        self.count -= 1
        self.rejections += 1
        if self.rejections > max(3, 2 * self.count):
            self.data.mark_invalid()


def install() -> None:
    if getattr(_fs.cu, "_engram_shim", False):
        return
    shim = types.SimpleNamespace(**{k: getattr(_cu, k) for k in dir(_cu) if not k.startswith("__")})
    shim.many = _OldMany
    shim._engram_shim = True
    _fs.cu = shim
