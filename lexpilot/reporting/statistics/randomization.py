"""The paired randomization test over cases that gives the rankings their p-values (approximate randomization:
Noreen 1989; Dror et al. 2018), and how many permutations a family of pairs needs.

Under the null hypothesis that two models are exchangeable, which model produced a case's outcomes is arbitrary:
each permutation swaps the two models' outcomes of a whole case (all runs together) with probability ½ and
recomputes the metric itself on the swapped counts (Macro-F1 and QWK are not means of cases). The two-sided p is
(k + 1) / (B + 1) over B permutations; when so few cases differ that every swap pattern fits in B, the patterns are
enumerated and p is exact. A case both models got alike in every run cannot change under a swap, so only the
differing cases are drawn. A drawn test stops once its p is sure to exceed α (Besag and Clifford 1991), its p then
h / L; every decision stays the full test's (`Randomization.stop_after`). A drawn test can be given further blocks of
patterns (`Randomization.refine`), for the sequential rule of settling.py. The pairs' tests run in threads.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field

import numpy as np

from lexpilot.errors import HarnessError
from lexpilot.reporting.scoring.groups import Group
from lexpilot.reporting.scoring.parallel import thread_map, workers
from lexpilot.reporting.scoring.runs import OVERALL, MetricKey
from lexpilot.reporting.scoring.scoring import TASKS
from lexpilot.text import counted

MAX_PERMUTATIONS = 100_000  # beyond, a report takes minutes; a larger --alpha or fewer pairs is the way out
CHUNK = 10_000  # enumerated patterns evaluated at once: bounds the memory of a pair's test
STEP = 2_000  # drawn permutations evaluated at once: a test that may stop early looks again after each step
RESOLUTION = 20  # the smallest p must be 20 times below what a rejection needs after Holm (see below)


def permutations_needed(pairs: int, alpha: float) -> int:
    """The permutations B a family of `pairs` tests needs so that a rejection stays possible after Holm's
    adjustment with room to spare: the smallest p, 1 / (B + 1), times the pairs is at most α / 20, that is
    (B + 1) ≥ 20 · m / α (at least 999: the intervals' default resolution)."""
    return max(999, math.ceil(RESOLUTION * max(pairs, 1) / alpha) - 1)


def check_permutations(asked: int | None, pairs: int, alpha: float) -> int:
    """The permutations to run: those asked for, or those the family needs; one line when neither can do (with no
    pair to test, any number does)."""
    needed = permutations_needed(pairs, alpha)
    if pairs == 0:
        return asked or needed
    if needed > MAX_PERMUTATIONS and (asked is None or asked < needed):
        raise HarnessError(
            f"--rank: {counted(pairs, 'pair')} at --alpha {alpha:g} need{'s' * (pairs == 1)} {needed:,} permutations, above the "
            f"cap of {MAX_PERMUTATIONS:,}: use a larger --alpha, or rank fewer models (--model)"
        )
    if asked is not None and asked < needed:
        raise HarnessError(
            f"--rank: {counted(pairs, 'pair')} at --alpha {alpha:g} need{'s' * (pairs == 1)} at least {needed:,} permutations "
            f"((B + 1) ≥ 20 · pairs / alpha), got --permutations {asked:,}; leave it out to have "
            "it chosen"
        )
    return asked or needed


EXACT, STOPPED, DRAWN = "exact", "stopped", "drawn"  # how a p was found


@dataclass
class Estimate:
    """One metric's p of one pair's test and how it was found: every pattern enumerated (EXACT); stopped once sure
    to exceed α, at the h-th pattern (`extreme`) as extreme as observed, the L-th (`drawn`) (STOPPED, p = h / L); or
    k (`extreme`) of n (`drawn`) patterns as extreme as observed (DRAWN, p = (k + 1) / (n + 1)); p None where the
    metric is undefined."""

    p: float | None
    how: str = EXACT
    extreme: int = 0
    drawn: int = 0


@dataclass
class Tested:
    """One pair's test of a task (and class): each metric's estimate, and how many further blocks it has drawn
    (its patterns: B · 2^blocks). The groups are held, so that no other group can take an id of theirs while their
    test is cached (a freed object's id is given to the next one made)."""

    a: Group
    b: Group
    estimates: dict[str, Estimate]
    blocks: int = 0


@dataclass
class Randomization:
    """Swap patterns drawn once per number of cases and seed, shared by every pair (each pair uses the columns
    of the cases where its two models differ); a pair's p-values of every metric of a task found together."""

    permutations: int
    seed: int = 0
    # α: a test stops once its p is sure to exceed it (Besag and Clifford 1991)
    stop_above: float | None = None
    _signs: dict = field(default_factory=dict)
    _p: dict[tuple, Tested] = field(default_factory=dict)  # (id(a), id(b), task, class) -> the test
    _drawing: threading.Lock = field(default_factory=threading.Lock)

    def signs(self, cases: int) -> np.ndarray:
        """Permutations × cases: 1 where the case's outcomes are swapped (float32, to multiply as it is)."""
        with self._drawing:  # drawn once, whichever thread asks first
            if cases not in self._signs:
                rng = np.random.default_rng([self.seed, cases])
                self._signs[cases] = (rng.random((self.permutations, cases)) < 0.5).astype(np.float32)
        return self._signs[cases]

    def prepare(self, pairs: list[tuple[Group, Group, MetricKey]]) -> None:
        """The p-values of many (A, B, key) at once, on every core, for `p_value` to read: each pair's test is
        the same whichever thread runs it (its swap patterns are drawn from the seed and the number of cases)."""
        todo = [item for item in self._distinct(pairs).items() if item[0] not in self._p]
        found = thread_map(lambda item: self.estimates(*item[1]), todo, workers(len(todo)))
        self._p.update((cached, Tested(a, b, p)) for (cached, (a, b, _, _)), p in zip(todo, found))

    @staticmethod
    def _distinct(pairs: list[tuple[Group, Group, MetricKey]]) -> dict[tuple, tuple]:
        """(A, B, key) by the test that answers them: one per pair, task and class (a task's metrics together)."""
        return {(id(a), id(b), key.family, key.part): (a, b, key.family, key.part) for a, b, key in pairs}

    def tested(self, a: Group, b: Group, key: MetricKey) -> Tested:
        """The pair's test of the key's task and class, run now if no `prepare` ran it."""
        cached = (id(a), id(b), key.family, key.part)
        if cached not in self._p:
            self._p[cached] = Tested(a, b, self.estimates(a, b, key.family, key.part))
        return self._p[cached]

    def estimate(self, a: Group, b: Group, key: MetricKey) -> Estimate:
        """The p of the difference of the groups' means on `key` (task, metric, class), and how it was found."""
        return self.tested(a, b, key).estimates.get(key.name, Estimate(None))

    def p_value(self, a: Group, b: Group, key: MetricKey) -> float | None:
        """Two-sided p of the difference of the groups' means on `key` (task, metric, class); None when the
        metric is undefined for either group."""
        return self.estimate(a, b, key).p

    def estimates(self, a: Group, b: Group, task: str, cls: str) -> dict[str, Estimate]:
        """metric -> two-sided p and how it was found, for every metric of the task."""
        aligned = paired_counts(a, b, task, cls)
        if aligned is None:
            return {}
        swapped = Swapped(*aligned, task)
        differing = swapped.differing.size
        observed = swapped.statistic(np.zeros((1, differing), dtype=np.float32), on_differing=True)
        defined = {m for m in observed if not np.isnan(observed[m][0])}
        if differing == 0:
            return {m: Estimate(1.0 if m in defined else None) for m in observed}
        if 2**differing <= self.permutations:  # every pattern, the identity included: p exact
            patterns = (np.arange(2**differing)[:, None] >> np.arange(differing) & 1).astype(np.float32)
            every = [(p, True) for p in np.array_split(patterns, max(1, len(patterns) // CHUNK))]
            extreme, total, _ = count_extremes(swapped, observed, every, None)
            return {m: Estimate(float(extreme[m] / total[m]) if m in defined else None) for m in observed}
        # the patterns over every case: a case that does not differ changes nothing
        signs = self.signs(swapped.cases)
        chunks = ((signs[start : start + STEP], False) for start in range(0, self.permutations, STEP))
        extreme, total, stopped = count_extremes(swapped, observed, chunks, self.stop_after)
        h = self.stop_after or 0  # a metric stops only with a stop_after
        return {
            m: Estimate(None)
            if m not in defined
            else Estimate(h / stopped[m], STOPPED, h, stopped[m])
            if m in stopped
            else Estimate(float((extreme[m] + 1) / (total[m] + 1)), DRAWN, extreme[m], total[m])
            for m in observed
        }

    def refine(self, pairs: list[tuple[Group, Group, MetricKey]]) -> None:
        """Doubles the patterns of each (A, B, key)'s test, on every core: a further block as large as all it drew
        before, and each drawn metric's p taken over them all (an enumerated p stays)."""
        todo = [
            (self.tested(a, b, MetricKey(task, "", cls)), task, cls)
            for a, b, task, cls in self._distinct(pairs).values()
        ]
        thread_map(lambda item: self._draw_block(*item), todo, workers(len(todo)))

    def _draw_block(self, tested: Tested, task: str, cls: str) -> None:
        """One further block of B · 2^blocks patterns of the pair's differing cases, from the seed, the number of
        cases and the block's number: the same for the same seed whichever other tests draw more. A metric that
        stopped early is first counted over the whole first block, as a drawn one (its h / L is no less a Monte-Carlo
        estimate, and near a threshold as unsure)."""
        aligned = paired_counts(tested.a, tested.b, task, cls)
        assert aligned is not None, "a drawn test had the task's counts"
        swapped = Swapped(*aligned, task)
        differing = swapped.differing.size
        observed = swapped.statistic(np.zeros((1, differing), dtype=np.float32), on_differing=True)
        if any(e.how == STOPPED for e in tested.estimates.values()):
            signs = self.signs(swapped.cases)
            first = ((signs[start : start + STEP], False) for start in range(0, self.permutations, STEP))
            extreme, total, _ = count_extremes(swapped, observed, first, None)
            for m, estimate in tested.estimates.items():
                if estimate.how == STOPPED:
                    tested.estimates[m] = Estimate(0.0, DRAWN, extreme[m], total[m])
        size = self.permutations * 2**tested.blocks
        rng = np.random.default_rng([self.seed, swapped.cases, tested.blocks + 1])
        tested.blocks += 1
        chunks = (
            (random_swaps(rng, min(STEP, size - start), differing), True) for start in range(0, size, STEP)
        )
        extreme, total, _ = count_extremes(swapped, observed, chunks, None)
        for m, estimate in tested.estimates.items():
            if estimate.how == DRAWN:
                estimate.extreme += extreme[m]
                estimate.drawn += total[m]
                estimate.p = (estimate.extreme + 1) / (estimate.drawn + 1)

    def refined(self) -> int:
        """How many tests (pair, task and class) drew further blocks."""
        return sum(t.blocks > 0 for t in self._p.values())

    def blocks(self, a: Group, b: Group, key: MetricKey) -> int:
        """The further blocks the pair's test has drawn (its patterns: B · 2^blocks)."""
        return self.tested(a, b, key).blocks

    @property
    def stop_after(self) -> int | None:
        """Besag and Clifford's h: a test stops at the h-th pattern as extreme as the observed difference, its p
        then h / L over the L ≤ B patterns drawn. At h = ⌊α · B⌋ + 1 both that p (h / L ≥ h / B) and the p of all
        B patterns ((k + 1) / (B + 1) with k ≥ h) exceed α, so every decision, and each Holm-adjusted p below α,
        is the full test's. (⌊α · (B + 1)⌋, the first rule, let h / L fall below α at some B: review of #36.)"""
        return None if self.stop_above is None else math.floor(self.stop_above * self.permutations) + 1


def random_swaps(rng: np.random.Generator, rows: int, cases: int) -> np.ndarray:
    """Rows × cases of 0/1, each with chance ½ (float32): from random bytes, eight swaps a byte."""
    drawn = rng.integers(0, 256, (rows, (cases + 7) // 8), dtype=np.uint8)
    return np.unpackbits(drawn, axis=1)[:, :cases].astype(np.float32)


def count_extremes(
    swapped: Swapped, observed: dict, chunks, stop_after: int | None
) -> tuple[dict, dict, dict]:
    """Per metric: the patterns at least as extreme as observed and the patterns where the metric is defined; and,
    with `stop_after` (h), the L of each metric whose h-th extreme came at the L-th defined pattern (its p h / L).
    The chunks stop once every defined metric has stopped."""
    extreme, total, stopped = {m: 0 for m in observed}, {m: 0 for m in observed}, {}
    deciding = {m for m in observed if not np.isnan(observed[m][0])}
    for chunk, on_differing in chunks:
        for m, values in swapped.statistic(chunk, on_differing).items():
            if m in stopped:
                continue
            hits = np.abs(values[~np.isnan(values)]) >= abs(observed[m][0]) - 1e-12
            if stop_after is not None and extreme[m] + hits.sum() >= stop_after:
                at = int(np.flatnonzero(extreme[m] + np.cumsum(hits) >= stop_after)[0])  # the h-th extreme
                stopped[m] = total[m] + at + 1
            extreme[m] += int(hits.sum())
            total[m] += hits.size
        if deciding <= set(stopped):
            break
    return extreme, total, stopped


def paired_counts(
    a: Group, b: Group, task: str, cls: str
) -> tuple[list[np.ndarray], list[np.ndarray]] | None:
    """Each run's per-case counts of the task (zero outside the class), on the cases every run of both groups
    has, in one order."""
    runs = [[r.tasks[task] for r in g.runs if task in r.tasks] for g in (a, b)]
    if not runs[0] or not runs[1]:
        return None
    common = set.intersection(*(set(d.cases) for d in runs[0] + runs[1]))
    order = [c for c in runs[0][0].cases if c in common]

    def counts(data) -> np.ndarray:
        index = {c: i for i, c in enumerate(data.cases)}
        rows = np.array([index[c] for c in order], dtype=int)
        chosen = data.counts[rows].astype(float) if rows.size else np.zeros((0, data.counts.shape[1]))
        if cls != OVERALL:
            chosen = chosen * (np.array(data.classes)[rows] == cls)[:, None]
        return chosen

    return [counts(d) for d in runs[0]], [counts(d) for d in runs[1]]


class Swapped:
    """One pair's runs under swap patterns. Each run of either model takes, on a swapped case, its partner run's
    counts: runs paired in order, the shorter list taken round again when the numbers of runs differ. Only the
    differing cases enter, and the products are taken once per distinct column of the differences (with equal
    numbers of runs, B's change is A's negated; a count every case keeps, such as the questions asked, drops out)."""

    def __init__(self, runs_a: list[np.ndarray], runs_b: list[np.ndarray], task: str):
        self.task, self.runs_a, self.cases = task, len(runs_a), len(runs_a[0])
        if len(runs_a) == len(runs_b):
            changes = [b - a for a, b in zip(runs_a, runs_b)]
            self.sides = [(i, 1.0) for i in range(len(runs_a))] + [(i, -1.0) for i in range(len(runs_b))]
        else:
            changes = [runs_b[i % len(runs_b)] - a for i, a in enumerate(runs_a)] + [
                runs_a[j % len(runs_a)] - b for j, b in enumerate(runs_b)
            ]
            self.sides = [(i, 1.0) for i in range(len(changes))]
        self.totals = np.stack([r.sum(axis=0) for r in runs_a + runs_b])  # run × count
        stacked = np.concatenate(changes, axis=1) if changes else np.zeros((self.cases, 0))
        self.differing = np.flatnonzero((stacked != 0).any(axis=1))
        width = changes[0].shape[1]
        columns, source, sign = distinct_columns(stacked[self.differing])
        self.on_differing = np.hstack([columns, np.zeros((len(columns), 1), np.float32)])  # the last: zero
        self.on_every_case = np.zeros((self.cases, self.on_differing.shape[1]), np.float32)
        self.on_every_case[self.differing] = self.on_differing
        source = np.where(source < 0, columns.shape[1], source)
        # per run of either side (run × count): the product column its count changes by, and the sign
        self.picks = np.stack([source[c * width : (c + 1) * width] for c, _ in self.sides])
        self.signs = np.stack([side_sign * sign[c * width : (c + 1) * width] for c, side_sign in self.sides])

    def statistic(self, swaps: np.ndarray, on_differing: bool) -> dict[str, np.ndarray]:
        """metric -> mean over A's runs − mean over B's runs, for each swap pattern (rows of `swaps`, float32, over
        the differing cases or over every case). Every run's metric is computed at once (run × pattern), as one
        call of the task's metric: ten calls on a pattern's row each took most of a ranking's time."""
        # exact: 0/1 × small counts
        product = swaps @ (self.on_differing if on_differing else self.on_every_case)
        totals = self.totals[:, None, :] + np.moveaxis(product[:, self.picks], 1, 0) * self.signs[:, None, :]
        return {
            m: group_mean(v[: self.runs_a]) - group_mean(v[self.runs_a :])
            for m, v in TASKS[self.task][2](totals).items()
        }


def distinct_columns(changes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The distinct non-zero columns up to sign (float32), and for each column of `changes` the distinct one it
    is (-1: zero) and its sign."""
    kept: list[np.ndarray] = []
    index: dict[bytes, int] = {}  # a column's bytes (sign made positive) -> its place in `kept`
    source, sign = np.full(changes.shape[1], -1), np.ones(changes.shape[1])
    for j in range(changes.shape[1]):
        column = changes[:, j]
        nonzero = np.flatnonzero(column)
        if not nonzero.size:
            continue
        flip = -1.0 if column[nonzero[0]] < 0 else 1.0
        key = (column * flip).tobytes()
        if key not in index:
            index[key] = len(kept)
            kept.append(column * flip)
        source[j], sign[j] = index[key], flip
    columns = np.array(kept, dtype=np.float32).T if kept else np.zeros((changes.shape[0], 0), np.float32)
    return columns, source, sign


def group_mean(values: np.ndarray) -> np.ndarray:
    """The mean over runs where the metric is defined, as a group's value is (NaN where no run has it)."""
    defined = ~np.isnan(values)
    total, count = np.where(defined, values, 0).sum(axis=0), defined.sum(axis=0)
    return np.divide(total, count, out=np.full(total.shape, np.nan), where=count > 0)
