"""Reports over a whole grid on every core: `fork_map` runs a function over items in forked processes.

A forked child starts with the parent's memory, so what a report has already read (the runs, the dataset) reaches
it without being sent; only each item's result comes back, pickled through a pipe. Where `fork` is not offered
(Windows) or one worker is asked for, the items are done here, one after the other, with the same results.
"""
from __future__ import annotations

import multiprocessing
import os
import pickle
from collections.abc import Callable, Sequence

from lexpilot.errors import HarnessError


def workers(count: int) -> int:
    """How many processes are worth starting for `count` items: one per core, never more than items."""
    return max(1, min(count, os.cpu_count() or 1))


def fork_map(fn: Callable, items: Sequence, processes: int) -> list:
    """[fn(item) for item in items] in `processes` processes (this one included), results in the items' order.
    An exception in a child is raised here as it was raised there."""
    if processes <= 1 or len(items) <= 1 or "fork" not in multiprocessing.get_all_start_methods():
        return [fn(item) for item in items]
    context = multiprocessing.get_context("fork")
    shares = [list(range(i, len(items), processes)) for i in range(processes)]  # strided: big and small items mix
    children = []
    for share in shares[1:]:
        receive, send = context.Pipe(duplex=False)
        child = context.Process(target=_child, args=(fn, [items[i] for i in share], send), daemon=True)
        child.start()
        send.close()  # the child holds its own end: a child that dies leaves the pipe at end of file
        children.append((child, receive))
    try:
        results = dict(zip(shares[0], (fn(items[i]) for i in shares[0])))
    except BaseException:
        for child, _ in children:  # nobody will read what they find
            child.terminate()
        raise
    for share, (child, receive) in zip(shares[1:], children):
        try:
            outcome, value = receive.recv()
        except EOFError:
            outcome, value = "died", None
        child.join()
        if outcome != "done":
            for other, _ in children:  # nobody will read what the others find
                other.terminate()
        if outcome == "raised":
            raise value
        if outcome != "done":
            raise HarnessError(f"a worker process ended without its results (exit code {child.exitcode}); "
                               "rerun, or free some memory")
        results.update(zip(share, value))
    return [results[i] for i in range(len(items))]


def _child(fn: Callable, items: list, send) -> None:
    try:
        outcome = ("done", [fn(item) for item in items])
    except BaseException as e:  # noqa: BLE001 (handed to the parent, which raises it)
        outcome = ("raised", e)
    try:
        send.send(outcome)
    except (pickle.PicklingError, TypeError, AttributeError):
        send.send(("raised", HarnessError(f"{type(outcome[1]).__name__}: {outcome[1]}")))
    send.close()
