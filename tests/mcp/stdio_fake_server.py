"""Run `serve_stdio` against the fake engine (a subprocess for test_stdio.py)."""

import os
from pathlib import Path

from mcp_support import SECRET, FakeEngine  # noqa: E402

from engram.service.mcp.host_context import binding_from_env  # noqa: E402
from engram.service.mcp.stdio import serve_stdio  # noqa: E402
from engram.service.settings import Settings  # noqa: E402

serve_stdio(FakeEngine(), binding_from_env(os.environ, SECRET), Settings(data_dir=Path(os.environ["FAKE_DATA_DIR"])))
