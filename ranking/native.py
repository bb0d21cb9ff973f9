"""The process-wide settings of the native libraries the ranking engines load.

Why a module of its own: two facts belong to the process, not to any one index, and
were side effects of importing or constructing one.

- **The C++ runtime.** usearch's extension links its own copy of the C++ runtime.
  Loaded before the system's, its locale facets win and ONNX Runtime (the query
  encoder) then crashes on import (usearch 2.26, ONNX Runtime 1.31). The system
  runtime loaded first, globally, keeps one copy for every extension:
  :func:`load_cxx_runtime` does it, and both :func:`usearch_index` and the encoder call
  it before they import their extension, whichever comes first.
- **The BLAS pool.** Ranking's numpy products are small (one query against a few
  hundred vectors) and gain nothing from threads, while OpenBLAS workers spin-wait after
  each call on the cores the encoder's threads need (the hybrid p99 this cost is in
  docs/results/query-encoder.md). :func:`prepare_process` asks for one BLAS thread; the process's
  entry point calls it (the ``engram`` command before any sub-command, the test
  session), and a program embedding the ranker may call it too.
- **glibc's malloc arenas.** Tantivy's writer threads and the encoder's each take an
  arena of their own (15 after one multi-threaded index write, against glibc's limit of
  eight per core), and memory freed in one is not reused by another: a server that
  rewrites a scope's index on every forget grew by megabytes a minute without leaking.
  :func:`prepare_process` caps the arenas at :data:`MALLOC_ARENAS` (the figures are in
  docs/results/reliability.md), unless ``MALLOC_ARENA_MAX`` names a number.
- **Open files.** Every scope keeps its vector rows file open, and a small one mapped as
  well (:mod:`ranking.vector_rows`: a map holds a descriptor of its own), beside its
  Tantivy segments: under the soft limit many systems start a process with (1,024), a
  process would run out of descriptors at a few hundred scopes. :func:`prepare_process`
  raises the soft limit to the hard one.
"""

from __future__ import annotations

import ctypes
import functools
import os
import resource
import sys
from types import ModuleType

#: The variable OpenBLAS reads for its pool size when it loads.
BLAS_THREADS_VARIABLE = "OPENBLAS_NUM_THREADS"
#: The malloc arenas a process may use, and glibc's names for that limit.
MALLOC_ARENAS = 2
MALLOC_ARENAS_VARIABLE = "MALLOC_ARENA_MAX"
_M_ARENA_MAX = -8  # mallopt's parameter number (malloc.h)


@functools.cache
def load_cxx_runtime() -> None:
    """Load the system's C++ runtime globally, once per process (see the module docstring)."""
    try:
        ctypes.CDLL("libstdc++.so.6", mode=ctypes.RTLD_GLOBAL)
    except OSError:  # no system C++ runtime: nothing else can then bring a second copy
        pass


def usearch_index() -> ModuleType:
    """``usearch.index``, imported after the system's C++ runtime."""
    load_cxx_runtime()
    import usearch.index

    return usearch.index


def numkong() -> ModuleType:
    """``numkong`` (usearch's SIMD kernels), imported after the system's C++ runtime."""
    load_cxx_runtime()
    import numkong

    return numkong


def limit_malloc_arenas() -> None:
    """Cap glibc's malloc arenas (see the module docstring); nothing elsewhere, or
    when the environment names the limit (glibc read it at start)."""
    if MALLOC_ARENAS_VARIABLE in os.environ:
        return
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:  # not glibc
        return
    mallopt = getattr(libc, "mallopt", None)
    if mallopt is not None:
        mallopt(_M_ARENA_MAX, MALLOC_ARENAS)


def raise_open_files_limit() -> None:
    """The soft limit on open files raised to the hard limit (see the module docstring)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and (hard == resource.RLIM_INFINITY or soft < hard):
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError):  # a platform that refuses: keep the soft limit
            pass


def prepare_process() -> None:
    """One BLAS thread for this process, unless the environment names a pool size:
    before numpy loads through the variable OpenBLAS reads, after it through
    threadpoolctl. Also caps the malloc arenas, raises the open-files limit and loads the
    C++ runtime first. Idempotent."""
    limit_malloc_arenas()
    raise_open_files_limit()
    load_cxx_runtime()
    if BLAS_THREADS_VARIABLE in os.environ:
        return
    if "numpy" in sys.modules:
        from threadpoolctl import threadpool_limits

        threadpool_limits(limits=1, user_api="blas")
    else:
        os.environ[BLAS_THREADS_VARIABLE] = "1"
