"""Where --max-cost's spending is kept, so that one cap holds for a whole grid: the money settled and the worst cases
reserved for calls in flight, each process's apart. A `Ledger` is one invocation's (`MemoryLedger`), an output root's
(`RootLedger`: `spending.json`, shared by every process and rerun on the machine that writes the root) or a grid's
across machines (models/shared_spending.py, in Redis).

A process that dies with reservations left (kill -9, a node preempted) may have been billed for its calls in flight:
its reservations are counted as spent when another process finds it gone, so the cap may stop a grid early, never
late (docs/cost.md).
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import socket
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Protocol, TypeVar

from lexpilot.errors import HarnessError

SPENDING_FILE = "spending.json"  # in the output root: what every invocation on it spent and has reserved
LOCK_FILE = "spending.lock"  # held (flock) while the spending is read and rewritten

T = TypeVar("T")


@dataclass(frozen=True)
class Totals:
    """Every process's spending: settled, reserved for calls in flight, and of the settled what processes found
    dead had reserved (counted as spent)."""

    spent: float
    reserved: float
    reclaimed: float = 0.0


class Ledger(Protocol):
    def reserve(self, worst: float, amount: float) -> tuple[bool, Totals]:
        """Reserve `worst` if every process's spent and reserved money leaves room for it under `amount`
        (False, with the totals, when it does not: nothing reserved)."""
        ...

    def settle(self, reserved: float, cost: float) -> None:
        """A call of this process is over: its reservation given back, its cost spent."""
        ...

    def totals(self) -> Totals: ...

    def close(self) -> None:
        """This process is done: its reservations left (batches submitted, collected later) are given back."""
        ...


class MemoryLedger:
    """One invocation's spending, kept in memory (a budget given no shared ledger)."""

    def __init__(self) -> None:
        self.spent = self.reserved = 0.0
        self.lock = threading.Lock()

    def reserve(self, worst: float, amount: float) -> tuple[bool, Totals]:
        with self.lock:
            ok = fits(self.spent, self.reserved, worst, amount)
            self.reserved += worst if ok else 0.0
            return ok, Totals(self.spent, self.reserved)

    def settle(self, reserved: float, cost: float) -> None:
        with self.lock:
            self.reserved, self.spent = max(0.0, self.reserved - reserved), self.spent + cost

    def totals(self) -> Totals:
        with self.lock:
            return Totals(self.spent, self.reserved)

    def close(self) -> None:
        with self.lock:
            self.reserved = 0.0


def fits(spent: float, reserved: float, worst: float, amount: float) -> bool:
    """Whether a call's worst case fits the cap beside what is spent and reserved (to a millionth of a cent, so that
    sums of floats that equal the cap by hand are not refused)."""
    return spent + reserved + worst <= amount + 1e-8


class RootLedger:
    """An output root's spending, in `spending.json`: every process on this machine that spends on the root (a
    grid, its shards, a rerun after a kill, a stage script) reads and rewrites it under one lock (`spending.lock`,
    flock), the new text written beside it and renamed over it, so a kill leaves the old spending or the new, never
    half of it. Each process's reservations are kept under its owner (host, pid, start time); one whose process is
    gone is counted as spent."""

    def __init__(self, root: Path):
        self.path, self.lock_path = root / SPENDING_FILE, root / LOCK_FILE
        self.owner, self.lock = process_owner(), threading.Lock()

    def reserve(self, worst: float, amount: float) -> tuple[bool, Totals]:
        def take(state: dict) -> tuple[bool, Totals]:
            ok = fits(state["spent"], sum(state["reserved"].values()), worst, amount)
            if ok:
                state["reserved"][self.owner] = state["reserved"].get(self.owner, 0.0) + worst
            return ok, totals_of(state)

        return self._update(take)

    def settle(self, reserved: float, cost: float) -> None:
        def give_back(state: dict) -> None:
            left = state["reserved"].get(self.owner, 0.0) - reserved
            if left > 1e-12:
                state["reserved"][self.owner] = left
            else:
                state["reserved"].pop(self.owner, None)
            state["spent"] += cost

        self._update(give_back)

    def totals(self) -> Totals:
        return self._update(totals_of)

    def close(self) -> None:
        self._update(lambda state: state["reserved"].pop(self.owner, None))

    def _update(self, change: Callable[[dict], T]) -> T:
        """`change` applied to the spending, read and rewritten under the lock; owners found gone first counted."""
        with self.lock:
            try:
                with open(self.lock_path, "a") as lock:
                    fcntl.flock(lock, fcntl.LOCK_EX)
                    state = self._read()
                    before = json.dumps(state, sort_keys=True)
                    reclaim_gone(state, self.owner)
                    result = change(state)
                    if json.dumps(state, sort_keys=True) != before:
                        self._write(state)
                    return result
            except OSError as e:
                raise HarnessError(
                    f"--max-cost: cannot keep the spending in {self.path} ({e.strerror or e}); check the output "
                    "root is writable"
                ) from None

    def _read(self) -> dict:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return {"spent": 0.0, "reclaimed": 0.0, "reserved": {}}
        try:
            return checked_state(json.loads(text))
        except (ValueError, TypeError):
            raise HarnessError(
                f"--max-cost: {self.path} is not what the harness wrote; restore it, or delete it to count this "
                "root's spending afresh (its records are kept)"
            ) from None

    def _write(self, state: dict) -> None:
        new = self.path.with_name(f".{SPENDING_FILE}.{os.getpid()}")
        new.write_text(json.dumps(state, sort_keys=True), encoding="utf-8")
        os.replace(new, self.path)


def checked_state(state) -> dict:
    """The saved spending, or ValueError where it is not what the harness writes."""
    if not isinstance(state, dict) or not isinstance(state.get("reserved"), dict):
        raise ValueError
    numbers = [state.get("spent"), state.get("reclaimed", 0.0), *state["reserved"].values()]
    if not all(
        isinstance(n, (int, float)) and not isinstance(n, bool) and math.isfinite(n) and n >= 0
        for n in numbers
    ):
        raise ValueError
    return {
        "spent": float(state["spent"]),
        "reclaimed": float(state.get("reclaimed", 0.0)),
        "reserved": dict(state["reserved"]),
    }


def totals_of(state: dict) -> Totals:
    return Totals(state["spent"], sum(state["reserved"].values()), state["reclaimed"])


def reclaim_gone(state: dict, me: str) -> None:
    """The reservations of processes of this machine that are gone, counted as spent (they may have been billed)."""
    for owner in [o for o in state["reserved"] if o != me and gone(o)]:
        amount = state["reserved"].pop(owner)
        state["spent"] += amount
        state["reclaimed"] += amount


def process_owner(pid: int | None = None) -> str:
    """A process's name in the ledger: host, pid and start time (a pid used again later is another process)."""
    pid = pid or os.getpid()
    return f"{socket.gethostname()}:{pid}:{started(pid)}"


def started(pid: int) -> str:
    """The process's start time in clock ticks since boot (Linux's /proc; "" elsewhere)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


def gone(owner: str) -> bool:
    """Whether the process an owner names has ended (only this machine's can be told; another's never is)."""
    parts = owner.rsplit(":", 2)
    if len(parts) != 3 or parts[0] != socket.gethostname() or not parts[1].isdigit():
        return False
    pid = int(parts[1])
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass
    return started(pid) != parts[2]


class BothLedgers:
    """A grid's spending through Redis (every shard's and worker's) kept in its output root's too, so that a stage
    script or another grid on the same root counts it: a call is reserved in both (given back in the first when the
    second refuses), settled in both, and the totals are the larger of each."""

    def __init__(self, root: Ledger, shared: Ledger):
        self.root, self.shared = root, shared

    def reserve(self, worst: float, amount: float) -> tuple[bool, Totals]:
        ok, totals = self.root.reserve(worst, amount)
        if not ok:
            return False, larger(totals, self.shared.totals())
        ok, shared = self.shared.reserve(worst, amount)
        if not ok:
            self.root.settle(worst, 0.0)
            totals = Totals(totals.spent, totals.reserved - worst, totals.reclaimed)
        return ok, larger(totals, shared)

    def settle(self, reserved: float, cost: float) -> None:
        self.root.settle(reserved, cost)
        self.shared.settle(reserved, cost)

    def totals(self) -> Totals:
        return larger(self.root.totals(), self.shared.totals())

    def close(self) -> None:
        self.root.close()
        self.shared.close()


def larger(a: Totals, b: Totals) -> Totals:
    return Totals(max(a.spent, b.spent), max(a.reserved, b.reserved), max(a.reclaimed, b.reclaimed))
