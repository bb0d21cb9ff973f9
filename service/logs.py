"""Logging configured once at start: the service's own loggers and the HTTP server's.

Why: the reasons behind a `-32603` refusal (expired context, tenant not enabled,
purpose mismatch ...) are logged by `engram.*` loggers, which nobody configured, so
they were invisible. Log lines never carry content: the service logs fixed reasons,
tool names and exception types, never arguments or memory text. Everything goes to
stderr (stdout is the protocol channel under `serve --stdio`).
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime

from engram.service.settings import LogFormat, LogLevel

#: Loggers that follow the chosen level; everything else stays at WARNING, so a
#: library's per-request chatter does not flood the log.
SERVICE_LOGGERS = ("engram", "uvicorn")


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time (UTC, ISO 8601), level, logger, message, and the
    line's own structured fields (``extra={"fields": {...}}``)."""

    def format(self, record: logging.LogRecord) -> str:
        line = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info and record.exc_info[0] is not None:
            line["exception"] = record.exc_info[0].__name__
        fields = getattr(record, "fields", None)  # logger.info(..., extra={"fields": {...}})
        if isinstance(fields, dict):
            line.update({k: v for k, v in fields.items() if k not in line})
        return json.dumps(line, ensure_ascii=False)


class StderrHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is when a line is logged, not when logging was
    configured: a host that swaps stderr (a test runner's capture) and closes it later
    must not leave the handler writing to a closed stream."""

    @property
    def stream(self):  # noqa: ANN201 - the StreamHandler attribute
        return sys.stderr

    @stream.setter
    def stream(self, _value) -> None:  # noqa: ANN001 - StreamHandler.__init__ assigns it
        pass


def configure_logging(level: LogLevel, fmt: LogFormat) -> None:
    """Send every log line to stderr in `fmt`; `engram.*` and uvicorn at `level`."""
    handler = StderrHandler()
    if fmt is LogFormat.JSON:
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(logging.WARNING)
    numeric = logging.getLevelName(level.value.upper())
    for name in SERVICE_LOGGERS:
        logger = logging.getLogger(name)
        logger.setLevel(numeric)
        for old in list(logger.handlers):  # uvicorn's own handlers would print twice
            logger.removeHandler(old)
        logger.propagate = True
