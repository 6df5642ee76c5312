"""Reports over a whole grid on every core: `fork_map` runs a function over items in forked processes, and
`thread_map` over arrays in threads.

A forked child starts with the parent's memory, so what a report has already read (the manifests, the dataset)
reaches it without being sent; only each item's result comes back, pickled through a pipe as soon as it is made.
The children take the next item when they are free (a heavy run does not hold back a share of light ones) and the
parent only gathers, so a result is read while the children work on the next. Where `fork` is not offered
(Windows) or one worker is asked for, the items are done here, one after the other, with the same results.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import pickle
import signal
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import Any

from lexpilot.errors import STOPS, HarnessError

# Under this many cases a report is made here, in one process: starting a forked worker costs 30–80 ms of CPU (more
# from a larger process), scoring a case about 0.5 ms, so below it the workers save at most a few hundredths of a
# second and spend more CPU than they save (`python -m bench.forking` measures both ways).
FORKED_FROM_CASES = 200


def workers(count: int, cases: int | None = None) -> int:
    """How many processes are worth starting for `count` items holding `cases` cases in all (None: not known): one
    per core, never more than items, and only this one under FORKED_FROM_CASES cases."""
    if cases is not None and cases < FORKED_FROM_CASES:
        return 1
    return max(1, min(count, os.cpu_count() or 1))


def thread_map(fn: Callable, items: Sequence, threads: int) -> list:
    """[fn(item) for item in items] in `threads` threads, results in the items' order: for NumPy work on large
    arrays, whose loops release the GIL. BLAS is held to one thread in each, for a BLAS that starts its own thread
    per core in every caller would put two on each core (the randomization test ran 1.7 times faster so, on two
    cores: docs/performance.md)."""
    if threads <= 1 or len(items) <= 1:
        return [fn(item) for item in items]
    with one_blas_thread(), ThreadPoolExecutor(min(threads, len(items))) as pool:
        return list(pool.map(fn, items))


def one_blas_thread():
    """BLAS held to one thread while the context lasts (threadpoolctl, which scikit-learn brings too)."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # without it, the threads share the cores with BLAS's own: slower, the same results
        return contextlib.nullcontext()
    return threadpool_limits(limits=1, user_api="blas")


def fork_map(fn: Callable, items: Sequence, processes: int) -> list:
    """[fn(item) for item in items] in `processes` forked processes, results in the items' order. An exception in
    a child is raised here as it was raised there, and the other children are stopped."""
    if processes <= 1 or len(items) <= 1 or "fork" not in multiprocessing.get_all_start_methods():
        return [fn(item) for item in items]
    context = multiprocessing.get_context("fork")
    taken = context.Value("i", 0)  # the next item's index: a free child takes it
    children: dict[Connection, BaseProcess] = {}
    try:
        with _stops_blocked():  # until each child has its own (_child)
            for _ in range(min(processes, len(items))):
                receive, send = context.Pipe(duplex=False)
                readers = [receive, *children]  # the reading ends this child inherits
                child: BaseProcess = context.Process(
                    target=_child, args=(fn, items, taken, send, readers), daemon=True
                )
                child.start()
                send.close()  # the child holds its own end: a child that dies leaves the pipe at end of file
                children[receive] = child
        return _gather(children, len(items))
    finally:
        for child in children.values():  # nobody reads what the others would find after a failure
            if child.is_alive():
                child.terminate()
            child.join()


def _gather(children: dict[Connection, BaseProcess], count: int) -> list:
    results: dict[int, object] = {}
    open_pipes = list(children)
    while open_pipes:
        for receive in wait(open_pipes):
            assert isinstance(receive, Connection), "wait() returns the pipes it was given"
            # ("item", index, result), ("raised", index, exception) or ("done", None, None) from the child;
            # ("died", None, exit code) when it ended without a word more
            message: tuple[str, int | None, Any]
            try:
                message = receive.recv()
            except EOFError:
                children[receive].join()
                message = ("died", None, children[receive].exitcode)
            outcome, index, value = message
            if outcome == "item":
                assert index is not None, "an item's result comes with its index"
                results[index] = value
                continue
            open_pipes.remove(receive)
            if outcome == "raised":
                assert isinstance(value, BaseException), "a child sends the exception it raised"
                raise value
            if outcome == "died" and value != 0:
                raise HarnessError(
                    f"a worker process ended without its results (exit code {value}); "
                    "rerun, or free some memory"
                )
    if len(results) != count:
        raise HarnessError("a worker process ended without its results; rerun, or free some memory")
    return [results[i] for i in range(count)]


@contextlib.contextmanager
def _stops_blocked():
    """Ctrl-C and SIGTERM held back in this thread while the context lasts, and in a child forked within it from its
    first instruction: a child runs the parent's code (the at-fork hooks, multiprocessing's start) before its own
    handlers are set, and a stop it met there ran the parent's handler. A reporting tool's handler raises
    KeyboardInterrupt (own_interrupts), which could leave the child's start and go on in the caller's code as a
    second copy of the program, or print a traceback. Held back, a stop waits for the handler meant for it."""
    before = signal.pthread_sigmask(signal.SIG_BLOCK, STOPS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


def _child(fn: Callable, items: Sequence, taken, send: Connection, readers: list[Connection]) -> None:
    # the parent's handlers are not the child's: the parent stops a child it no longer needs with SIGTERM, which
    # ends it quietly, and a Ctrl-C, which reaches the whole process group, is the parent's to handle (it stops its
    # children); then the stops held back since the fork (_stops_blocked) are let through
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOPS)
    # the reading ends the fork gave this child (its own pipe's, its elder siblings'): with only the parent's left
    # open, a parent that died (kill -9, the OOM killer) leaves no reader, and the next result ends this child
    # instead of filling the pipe and waiting for a reader forever
    for reader in readers:
        reader.close()
    try:
        _work(fn, items, taken, send)
        send.send(("done", None, None))
    except OSError:  # the parent is gone (BrokenPipeError): nobody to tell
        return
    send.close()


def _work(fn: Callable, items: Sequence, taken, send: Connection) -> None:
    """Take the next free item until none is left or one raises, sending each outcome to the parent."""
    while True:
        with taken.get_lock():
            index = taken.value
            taken.value += 1
        if index >= len(items):
            return
        try:
            outcome = ("item", index, fn(items[index]))
        except BaseException as e:  # noqa: BLE001 (handed to the parent, which raises it)
            outcome = ("raised", index, e)
        try:
            send.send(outcome)
        except (pickle.PicklingError, TypeError, AttributeError) as e:
            problem = outcome[2] if outcome[0] == "raised" else e
            outcome = ("raised", index, HarnessError(f"{type(problem).__name__}: {problem}"))
            send.send(outcome)
        if outcome[0] == "raised":
            return
