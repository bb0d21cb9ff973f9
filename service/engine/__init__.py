"""The memory engine: lifecycle, admission, idempotency, gates, sealing, search."""

from .context import CallContext, Confirmation
from .engine import Engine

__all__ = ["CallContext", "Confirmation", "Engine"]
