"""Server-process entry point for the crash tests: the real app over a real Engine with
the hashing test encoder (no model), served by uvicorn on a loopback port.

    python tests/reliability/launcher.py DATA_DIR PORT

The host secret is rel_support.SECRET; tenants acme and umbrella are enabled. Like
`engram serve`, it owns the data directory (its lock) and answers operator commands on
the directory's operator socket.
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run as a script: its own folder is on sys.path; the support modules it shares with the
# suite live beside the engine and MCP tests (pytest's `pythonpath` setting, in-process).
TESTS = Path(__file__).resolve().parents[1]
sys.path[1:1] = [str(TESTS / "mcp"), str(TESTS / "engine"), str(TESTS / "ranking")]

import uvicorn  # noqa: E402
from host_secret_support import SECRET  # noqa: E402
from ranking_support import HashingTestEncoder  # noqa: E402

from engram.service.engine.engine import Engine  # noqa: E402
from engram.service.http.app import create_app  # noqa: E402
from engram.service.operator.channel import OperatorChannel  # noqa: E402
from engram.service.operator.ownership import DataDirLock  # noqa: E402
from engram.service.settings import Settings  # noqa: E402


def main() -> None:
    data_dir, port = Path(sys.argv[1]), int(sys.argv[2])
    DataDirLock(data_dir).acquire()  # held until the process ends (or is killed)
    engine = Engine.open(data_dir, encoder=HashingTestEncoder(), load_model=False)
    for tenant in ("acme", "umbrella"):
        if not engine.tenant_enabled(tenant):
            engine.operator.set_tenant_enabled(tenant, True)
    app = create_app(engine, Settings(data_dir=data_dir, rate=0), host_secret=SECRET, close_engine=True)
    OperatorChannel(engine, data_dir).start()
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")


if __name__ == "__main__":
    main()
