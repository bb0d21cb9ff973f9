"""The built package installs and works on its own: wheel -> fresh venv -> `engram`.

Kept cheap for CI: the wheel is built without build isolation, installed with
`--no-deps` into a bare venv that borrows this interpreter's installed dependencies
through a `.pth` line (never the source tree: no PYTHONPATH, another working
directory), then the INSTALLED `engram` command ingests a tiny corpus and answers a
lexical search over stdio. The base install must not need the `eval` extra.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters

from engram.models.tools import SEARCH

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("models", "ranking", "service", "index_data", "eval", "pyproject.toml", "README.md")
pytestmark = [pytest.mark.package, pytest.mark.anyio]


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR")}
    env.update(extra)
    return env


def _run(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, env=_clean_env(**env), capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A venv holding only the built wheel; returns its bin directory."""
    work = tmp_path_factory.mktemp("package")
    src = work / "src"
    src.mkdir()
    for name in SOURCES:  # a copy, so the build leaves nothing in the checkout
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=shutil.ignore_patterns("__pycache__", "results", "bench-results"))
        else:
            shutil.copy2(path, src / name)
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
