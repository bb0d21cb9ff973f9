"""The ranking engines' process-wide settings are an explicit set-up, not import effects.

Each case runs in a fresh interpreter, since what it checks (the C++ runtime, the BLAS
pool, the modules loaded) belongs to the process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest


def run_fresh(code: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=100)


def test_importing_the_ranker_changes_nothing_of_the_process() -> None:
    done = run_fresh(
        "import json, os, sys\n"
        "import engram.ranking, engram.ranking.semantic, engram.ranking.onnx_encoder\n"
        "print(json.dumps(['usearch.index' in sys.modules, 'onnxruntime' in sys.modules,"
        " os.environ.get('OPENBLAS_NUM_THREADS')]))"
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [False, False, None]


@pytest.mark.parametrize("numpy_first", [False, True], ids=["before-numpy", "after-numpy"])
def test_prepare_process_leaves_one_blas_thread(numpy_first: bool) -> None:
    done = run_fresh(
        ("import numpy\n" if numpy_first else "") + "from engram.ranking.native import prepare_process\n"
        "prepare_process()\n"
        "import numpy, json\n"
        "from threadpoolctl import threadpool_info\n"
        "print(json.dumps([p['num_threads'] for p in threadpool_info() if p['user_api'] == 'blas']))"
    )
    assert done.returncode == 0, done.stderr
    pools = json.loads(done.stdout)
    assert pools and set(pools) == {1}


def test_usearch_then_onnx_runtime_load_in_one_process() -> None:
    """usearch imported bare, then ONNX Runtime, crashes the interpreter (its own copy of
    the C++ runtime wins); through the accessor, both load and work."""
    done = run_fresh(
        "import numpy as np\n"
        "from engram.ranking.native import usearch_index\n"
        "index = usearch_index().Index(ndim=4, metric='ip')\n"
        "index.add(7, np.ones(4, dtype=np.float32))\n"
        "import onnxruntime\n"
        "onnxruntime.SessionOptions()\n"
        "print(int(index.search(np.ones(4, dtype=np.float32), 1).keys[0]))"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "7"


def test_prepare_process_caps_the_malloc_arenas() -> None:
    """After a multi-threaded Tantivy write, glibc reports its arenas (malloc_info): at
    most the cap once the process is prepared, against one per writer thread and more
    without it."""
    probe = (
        "import ctypes, sys, tempfile\n"
        "{prepare}"
        "import tantivy\n"
        "builder = tantivy.SchemaBuilder(); builder.add_text_field('body', stored=True)\n"
        "index = tantivy.Index(builder.build(), path=tempfile.mkdtemp())\n"
        "writer = index.writer(heap_size=60_000_000, num_threads=4)\n"
        "for i in range(40_000):\n"
        "    writer.add_document(tantivy.Document(body=f'document {{i}} with words {{i * 7}}'))\n"
        "writer.commit(); writer.wait_merging_threads()\n"
        "libc = ctypes.CDLL('libc.so.6'); libc.fopen.restype = ctypes.c_void_p\n"
        "path = tempfile.mktemp(); stream = ctypes.c_void_p(libc.fopen(path.encode(), b'w'))\n"
        "libc.malloc_info(0, stream); libc.fclose(stream)\n"
        "print(open(path).read().count('<heap nr='))"
    )
    if not hasattr(__import__("ctypes").CDLL("libc.so.6"), "malloc_info"):
        pytest.skip("not glibc: no malloc arenas to count")
    prepared = run_fresh(probe.format(prepare="from engram.ranking.native import prepare_process; prepare_process()\n"))
    bare = run_fresh(probe.format(prepare=""))
    assert prepared.returncode == 0 and bare.returncode == 0, prepared.stderr + bare.stderr
    from engram.ranking.native import MALLOC_ARENAS

    assert int(prepared.stdout) <= MALLOC_ARENAS < int(bare.stdout)


def test_prepare_process_raises_the_open_files_limit_to_the_hard_one() -> None:
    import resource

    if resource.getrlimit(resource.RLIMIT_NOFILE)[1] <= 256:
        pytest.skip("a hard limit this low leaves no lower soft limit to raise")
    probe = (
        "import json, resource\n"
        "soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (min(256, hard), hard))\n"
        "from engram.ranking.native import prepare_process\n"
        "prepare_process()\n"
        "print(json.dumps([*resource.getrlimit(resource.RLIMIT_NOFILE), hard]))"
    )
    done = run_fresh(probe)
    assert done.returncode == 0, done.stderr
    soft, now_hard, hard = json.loads(done.stdout)
    assert soft == now_hard == hard and hard > 256
