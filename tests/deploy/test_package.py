"""The built package installs and works on its own: wheel -> fresh venv -> `engram`.

Kept cheap for CI: the wheel is built without build isolation, installed with
`--no-deps` into a bare venv that borrows this interpreter's installed dependencies
through a `.pth` line (never the source tree: no PYTHONPATH, another working
directory), then the INSTALLED `engram` command ingests a tiny corpus and answers a
lexical search over stdio. The base install must not need the `eval` extra.

The one-line launch from the wheel (`uvx`, docs/clients.md) is the exception, and the
suite's one test that resolves a whole environment from the package index: it runs the
documented block as pasted, with uv's cache and torch's CPU wheel kept in pytest's cache
directory so that a run pays the download once.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
import time
import tomllib
import zipfile
from pathlib import Path
from typing import Any

import anyio
import factories
import pytest
from mcp import Client, StdioServerParameters

from engram.models.tools import CAPTURE, REQUEST_ADMISSION, SEARCH, TOOLS
from engram.service.mcp.local_context import DEFAULT_PURPOSE as LOCAL_PURPOSE
from engram.service.operator.ownership import is_held

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("models", "ranking", "service", "index_data", "eval", "pyproject.toml", "README.md")
pytestmark = [pytest.mark.package, pytest.mark.anyio]


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR")}
    env.update(extra)
    return env


def _run(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, env=_clean_env(**env), capture_output=True, text=True, timeout=300)


def _copy_sources(src: Path) -> Path:
    """What the wheel is built from, copied, so that a build leaves nothing in the checkout."""
    src.mkdir()
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=shutil.ignore_patterns("__pycache__", "results", "bench-results"))
        else:
            shutil.copy2(path, src / name)
    return src


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A venv holding only the built wheel; returns its bin directory."""
    work = tmp_path_factory.mktemp("package")
    src = _copy_sources(work / "src")
    wheels = work / "wheels"
    built = _run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(wheels), str(src)],
        work,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = wheels.glob("sentropic_engram-*.whl")
    venv = work / "venv"
    assert _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], work).returncode == 0
    py = venv / "bin" / "python"
    done = _run([sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-deps", str(wheel)], work)
    assert done.returncode == 0, done.stderr
    # Borrow the dependencies this interpreter has (a plain path line: no editable finders run).
    site = Path(_run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], work).stdout.strip())
    deps = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (site / "zz_borrowed_deps.pth").write_text("\n".join(sorted(deps)) + "\n")
    where = _run(
        [str(py), "-c", "import engram.service as s, engram.models as m; print(s.__file__); print(m.__file__)"], work
    )
    assert where.returncode == 0, where.stderr
    assert all(Path(line).is_relative_to(venv) for line in where.stdout.split()), where.stdout
    return venv / "bin"


def _built_wheel(installed: Path) -> Path:
    (wheel,) = (installed.parents[1] / "wheels").glob("sentropic_engram-*.whl")
    return wheel


def test_the_wheel_installs_one_namespace(installed):
    """Only `engram` lands in site-packages: no generic `models`, `eval` or `service`."""
    with zipfile.ZipFile(_built_wheel(installed)) as wheel:
        names = wheel.namelist()
    top = {name.split("/", 1)[0] for name in names if not name.split("/", 1)[0].endswith(".dist-info")}
    assert top == {"engram"}, top
    rooms = {name.split("/")[1] for name in names if name.startswith("engram/") and name.count("/") >= 2}
    assert rooms == {"models", "ranking", "service", "index_data", "eval"}, rooms


def test_every_package_folder_is_listed_for_the_wheel():
    """A new sub-package folder must be named in pyproject's package list, or the wheel lacks it."""
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    on_disk = {
        "engram." + ".".join(init.parent.relative_to(ROOT).parts)
        for room in ("models", "ranking", "service", "index_data", "eval")
        for init in (ROOT / room).rglob("__init__.py")
    }
    assert on_disk == listed, on_disk ^ listed


def test_installed_help_without_the_eval_extra(installed, tmp_path):
    blocker = tmp_path / "blocker"
    blocker.mkdir()
    # The eval extra's modules are made unimportable: help and serve must not need them.
    (blocker / "sitecustomize.py").write_text(
        "import sys\nfor m in ('matplotlib', 'pytrec_eval', 'httpx2'):\n    sys.modules[m] = None\n"
    )
    result = _run([str(installed / "engram"), "--help"], tmp_path, PYTHONPATH=str(blocker))
    assert result.returncode == 0, result.stderr
    for command in ("serve", "admin", "ingest", "eval", "bench"):
        assert command in result.stdout
    assert "unavailable" not in result.stderr
    corpus = tmp_path / "c"
    corpus.mkdir()
    (corpus / "corpus.jsonl").write_text("")
    evaluation = _run([str(installed / "engram"), "eval", "--dataset", str(corpus)], tmp_path, PYTHONPATH=str(blocker))
    assert evaluation.returncode == 2 and "sentropic-engram[eval]" in evaluation.stderr, evaluation.stderr


async def test_installed_command_ingests_and_searches(installed, tmp_path):
    engram = str(installed / "engram")
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    docs = [
        {"_id": "d1", "title": "Postgres vacuum", "text": "Autovacuum thresholds tuned for the billing ledger."},
        {"_id": "d2", "title": "Kubernetes ingress", "text": "Certificate rotation on the ingress controller."},
        {"_id": "d3", "title": "Wheels", "text": "Manylinux wheels built in CI for every release."},
    ]
    (corpus / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    data = tmp_path / "data"
    ingest = _run(
        [
            engram,
            "ingest",
            str(corpus),
            "-d",
            str(data),
            "--tenant",
            "acme",
            "--workspace",
            "w",
            "--no-model",
            "--no-progress",
        ],
        tmp_path,
    )
    assert ingest.returncode == 0, ingest.stderr
    enable = _run([engram, "admin", "tenant", "enable", "acme", "-d", str(data)], tmp_path)
    assert enable.returncode == 0, enable.stderr
    ctx = tmp_path / "ctx.json"
    ctx.write_text(
        json.dumps(
            {
                "tenant": "acme",
                "workspace": "w",
                "principal": "me",
                "agent_id": "a",
                "session": "s",
                "purpose": "purpose:ingest",
                "tools": [SEARCH],
                "confirm": [],
            }
        )
    )
    server = StdioServerParameters(
        command=engram,
        args=["serve", "--stdio", "--no-model", "-d", str(data)],
        env=_clean_env(ENGRAM_CONTEXT_FILE=str(ctx)),
        cwd=str(tmp_path),
    )
    async with Client(server) as client:
        result = await client.call_tool(
            SEARCH, {"query": "ingress certificate rotation", "purpose_ref": "purpose:ingest"}
        )
    envelope = result.structured_content
    assert envelope["ok"] is True, envelope
    records = envelope["output"]["value"]["records"]
    assert records and "ingress" in json.dumps(records[0]).lower()


# --------------------------------------------------------------------------- one line from the wheel

#: The page whose block the launch test runs as pasted (the block after the skip marker naming it).
LAUNCH_DOC = ROOT / "docs" / "clients.md"
LAUNCH_TEST = "tests/deploy/test_package.py::test_the_documented_one_line_launch"
#: A tool call on a fresh data directory waits for the model's first preparation within its
#: deadline; past it the answer is DEADLINE_EXCEEDED (retriable, nothing applied), retried as a client does.
WARM_ATTEMPTS = 10
#: How long the launched server may take to let go of the data directory once its client has left.
RELEASE_WAIT_S = 120.0
#: What the launched environment holds: torch's build and every installed distribution's name.
PROBE = (
    "import importlib.metadata as m, json, torch; "
    "print(json.dumps({'torch': torch.__version__, 'cuda': torch.version.cuda, "
    "'names': sorted(d.metadata['Name'].lower() for d in m.distributions())}))"
)


def _documented_launch() -> list[str]:
    """The commands of the launch block in docs/clients.md, continuation lines joined."""
    after = LAUNCH_DOC.read_text().split(LAUNCH_TEST, 1)[1]
    block = after.split("```bash\n", 1)[1].split("```", 1)[0]
    lines = (line.strip() for line in block.replace("\\\n", " ").splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def _launch_prerequisites(cache: Path, torch_pin: str) -> dict[str, str]:
    """uvx beside this interpreter, and torch's CPU wheel wherever pip finds it (as `bin/setup`),
    fetched once into `cache`; the variables the documented lines read. Skips (fails with
    ENGRAM_REQUIRE_WHEEL_LAUNCH set, as in CI) when either is missing."""
    scripts = sysconfig.get_paths()["scripts"]
    path = os.pathsep.join([scripts, os.environ.get("PATH", "")])
    reason = None if shutil.which("uvx", path=path) else "uvx is not installed (the test extra's uv)"
    wheels = cache / "torch-cpu"
    if reason is None and not any(wheels.glob("torch-*.whl")):
        fetched = subprocess.run(  # pip as configured here: its find-links, indexes, proxy and certificates
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "-d", str(wheels)]
            + [torch_pin],
            capture_output=True,
            text=True,
            timeout=1800,
        )
        if fetched.returncode != 0:
            reason = f"pip finds no {torch_pin}: {fetched.stderr.strip()[-300:]}"
    if reason is not None:
        if os.environ.get("ENGRAM_REQUIRE_WHEEL_LAUNCH"):
            pytest.fail(reason)
        pytest.skip(reason)
    # The user's cache directory is kept: uv's (the environment's downloads) and engram's
    # (the model's runtime files) are made by the first run; HOME and the data are fresh.
    return {"PATH": path, "PIP_FIND_LINKS": str(wheels), "XDG_CACHE_HOME": str(cache / "user-cache")}


def _fresh_home_env(home: Path, **extra: str) -> dict[str, str]:
    """This environment (proxies, certificates, package indexes, locale) with a fresh HOME and
    nothing of engram's, Python's or another user directory's; `extra` on top."""
    gone = ("XDG_", "ENGRAM_", "PYTHON", "VIRTUAL_ENV")
    return {**{k: v for k, v in os.environ.items() if not k.startswith(gone)}, "HOME": str(home), **extra}


async def _until_warm(client: Client, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    for _ in range(WARM_ATTEMPTS):
        envelope = (await client.call_tool(tool, arguments)).structured_content
        if envelope["ok"] or envelope["error"]["code"] != "DEADLINE_EXCEEDED":
            return envelope
    return envelope


async def test_the_documented_one_line_launch(tmp_path, request):
    """docs/clients.md's block, as pasted, in a fresh HOME: the wheel built, the scope bound,
    then the one-line `uvx` launch served to the SDK's stdio client; torch is the CPU build."""
    *setup, launch = _documented_launch()
    assert launch.split()[-3:] == ["engram", "serve", "--stdio"], launch
    (torch_pin,) = (word for word in launch.split() if word.startswith("torch=="))
    env = _fresh_home_env(
        tmp_path / "home",
        **_launch_prerequisites(request.config.cache.mkdir("wheel-launch"), torch_pin),
        ENGRAM_CLIENT_IDLE_S="1",  # nothing lingers after the client leaves
    )
    checkout = _copy_sources(tmp_path / "checkout")
    for command in setup:
        done = subprocess.run(
            ["bash", "-c", command], cwd=checkout, env=env, capture_output=True, text=True, timeout=1800
        )
        assert done.returncode == 0, f"{command}\n{done.stderr[-3000:]}"
    data = tmp_path / "home" / ".local" / "share" / "engram"  # the user's data directory in that HOME
    server = StdioServerParameters(command="bash", args=["-c", launch], env=env, cwd=str(checkout))
    async with Client(server) as client:
        assert sorted(t.name for t in (await client.list_tools()).tools) == sorted(TOOLS)
        text = "Rotate the ingress certificates every month."
        captured = await _until_warm(client, CAPTURE, factories.capture_args(text, purpose_ref=LOCAL_PURPOSE))
        assert captured["ok"] is True, captured
        candidate = captured["output"]["value"]["candidate_id"]
        admission = {"candidate_id": candidate, "idempotency_key": factories.key("adm")}
        admitted = await _until_warm(client, REQUEST_ADMISSION, admission)
        assert admitted["ok"] is True, admitted
        found = await _until_warm(client, SEARCH, {"query": "ingress certificates", "purpose_ref": LOCAL_PURPOSE})
        assert found["ok"] is True, found
        assert [r["record"]["record_id"] for r in found["output"]["value"]["records"]] == [
            admitted["output"]["value"]["outcome"]["record_id"]
        ]
    deadline = time.monotonic() + RELEASE_WAIT_S  # a bound on waiting for an event, never on speed
    while is_held(data):
        assert time.monotonic() < deadline, "the launched server still holds the data directory"
        await anyio.sleep(0.1)
    probe = launch.replace("engram serve --stdio", "python -c " + shlex.quote(PROBE))
    inside = subprocess.run(["bash", "-c", probe], cwd=checkout, env=env, capture_output=True, text=True, timeout=600)
    assert inside.returncode == 0, inside.stderr[-3000:]
    launched = json.loads(inside.stdout.strip().splitlines()[-1])
    assert launched["torch"].endswith("+cpu") and launched["cuda"] is None, launched
    assert "sentropic-engram" in launched["names"]
    assert not [name for name in launched["names"] if name.startswith("nvidia")], launched["names"]
