"""Turns: the order a load's writing workers commit in, whichever examined a chunk.

Threads stand in for the worker processes here: the turns are the same
multiprocessing primitives either way."""

from __future__ import annotations

import threading

from engram.index_data.worker_start import worker_context
from engram.index_data.writer import LoadStopped, Turns


def take(turns: Turns, n: int, done: list[int], fail: bool = False) -> BaseException | None:
    try:
        with turns.turn(n):
            if fail:
                raise RuntimeError(f"chunk {n}")
            done.append(n)
    except BaseException as exc:
        return exc
    return None


def run_all(turns: Turns, order: list[int], failing: int | None = None) -> tuple[list[int], dict[int, BaseException]]:
    """Each chunk of ``order`` asks for its turn on its own thread, started in that
    order, the later ones first where it is reversed."""
    done: list[int] = []
    errors: dict[int, BaseException] = {}

    def one(n: int) -> None:
        exc = take(turns, n, done, fail=n == failing)
        if exc is not None:
            errors[n] = exc

    threads = [threading.Thread(target=one, args=(n,), daemon=True) for n in order]  # a hang fails, not blocks
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
        assert not thread.is_alive()
    return done, errors


def test_chunks_commit_in_the_order_they_were_cut_whoever_asks_first():
    done, errors = run_all(Turns(worker_context()), [4, 3, 2, 1, 0])
    assert done == [0, 1, 2, 3, 4] and not errors


def test_a_failed_chunk_stops_the_chunks_after_it_and_not_those_before():
    done, errors = run_all(Turns(worker_context()), [3, 1, 4, 0, 2], failing=2)
    assert done == [0, 1]
    assert isinstance(errors.pop(2), RuntimeError)
    assert all(isinstance(exc, LoadStopped) for exc in errors.values()) and sorted(errors) == [3, 4]


def test_a_chunk_that_failed_before_its_turn_stops_the_later_ones():
    """A chunk that failed to be examined never takes its turn: the ones after it stop,
    the ones before it still commit."""
    turns = Turns(worker_context())
    turns.fail(1)
    done, errors = run_all(turns, [2, 0])
    assert done == [0]
    assert isinstance(errors[2], LoadStopped)
    assert isinstance(take(turns, 3, []), LoadStopped)
