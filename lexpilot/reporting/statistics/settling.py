"""The sequential rule that keeps a ranking's decisions from turning on the randomization test's own Monte-Carlo
error: which drawn tests need more permutations, when they have enough, and which decisions are still unsettled at
the cap.

A drawn p = (k + 1) / (B + 1) is an estimate; the decision reads it against its own Holm threshold, α / (m − i + 1)
at its place i among the family's m p-values in increasing order. Where the p's Monte-Carlo interval (Clopper and
Pearson, at error `LEVEL`) holds that threshold, another seed could decide otherwise: such a test draws a further
block as large as all it drew (`Randomization.refine`: B, 2B, 4B, …), Holm's order is taken again, and so on until
no interval holds its threshold or a test has drawn `CAP` times B. An enumerated p is exact, settled by
construction. A test stopped early (Besag and Clifford) is sure to exceed α over its own B patterns, not over
another seed's: its h of L is an estimate like any drawn p, and one whose interval holds the threshold is counted
over its whole first block and refined like the others. A decision is settled when no unsettled test can change it:
"different" when every test up to its place in Holm's order lies below its threshold, "not different" when one up
to its place lies above; else it is unsettled. docs/statistics.md says more.
"""

from __future__ import annotations

from dataclasses import dataclass

from lexpilot.reporting.scoring.groups import Group
from lexpilot.reporting.scoring.runs import MetricKey
from lexpilot.reporting.statistics.randomization import EXACT, Estimate, Randomization

LEVEL = 0.001  # the Monte-Carlo interval's error, both sides together: 99.9% Clopper–Pearson
BLOCKS = 4  # further blocks at most, each doubling the patterns: the cap is 2^4 = 16 times B
CAP = 2**BLOCKS

BELOW, ABOVE, STRADDLES = "below", "above", "straddles"  # a test's p against its own Holm threshold

Pair = tuple[Group, Group, MetricKey]


def monte_carlo_interval(extreme: int, drawn: int, level: float = LEVEL) -> tuple[float, float]:
    """The exact (Clopper–Pearson) interval of the chance that a drawn pattern is as extreme as observed, from
    `extreme` of `drawn` patterns, at error `level` (half each side)."""
    from scipy.special import betaincinv  # here: SciPy took half of every report's start (0.28 s of 0.6 s)

    low = 0.0 if extreme == 0 else float(betaincinv(extreme, drawn - extreme + 1, level / 2))
    high = 1.0 if extreme == drawn else float(betaincinv(extreme + 1, drawn - extreme, 1 - level / 2))
    return low, high


def side(estimate: Estimate, times: int, alpha: float) -> str:
    """Where a p lies against its Holm threshold α / `times` (times = m − i + 1 at place i): compared as Holm's
    adjusted p is (p · times < α), and for a drawn p with its whole interval on the same side."""
    assert estimate.p is not None, "only defined p-values enter a family"
    below = estimate.p * times < alpha
    if estimate.how == EXACT:
        return BELOW if below else ABOVE
    # a stopped test's h of L is as unsure an estimate as a drawn one's k of n: another seed could stop it later,
    # or not at all (L is taken as if fixed: near enough at the hundreds of extremes h is)
    low, high = monte_carlo_interval(estimate.extreme, estimate.drawn)
    if below and high * times < alpha:
        return BELOW
    if not below and low * times >= alpha:
        return ABOVE
    return STRADDLES


@dataclass
class Family:
    """The sides of one family's tests (the pairs of one metric and comparable set), in the family's order."""

    sides: list[str]
    order: list[int]  # the tests' indices by increasing p: Holm's order

    def unsettled(self) -> list[bool]:
        """Per test, whether its decision turns on a test still straddling: none up to its place lies above its
        threshold, and not all lie below."""
        out, any_above, all_below = [False] * len(self.sides), False, True
        for i in self.order:
            any_above = any_above or self.sides[i] == ABOVE
            all_below = all_below and self.sides[i] == BELOW
            out[i] = not (any_above or all_below)
        return out


def family_sides(family: list[Pair], test: Randomization, alpha: float) -> Family:
    """Each test's side against its own Holm threshold, at its place in the order of the p-values as they are now
    (sorted as `letters.holm` sorts them, so that the places are the adjustment's)."""
    estimates = [test.estimate(*pair) for pair in family]
    order = sorted(range(len(family)), key=lambda i: estimates[i].p)  # type: ignore[arg-type, return-value]
    sides = [""] * len(family)
    for place, i in enumerate(order):
        sides[i] = side(estimates[i], len(family) - place, alpha)
    return Family(sides, order)


def settle(families: list[list[Pair]], test: Randomization, alpha: float) -> list[list[bool]]:
    """Draws more patterns for every test whose p straddles its Holm threshold, the order taken again after each
    round, until none does or each that does has drawn CAP · B; per family and pair, whether its decision is still
    unsettled. Each pair's p-value must be defined."""
    while True:
        found = [family_sides(family, test, alpha) for family in families]
        straddling = [
            pair
            for family, sides in zip(families, found)
            for pair, where in zip(family, sides.sides)
            if where == STRADDLES and test.blocks(*pair) < BLOCKS
        ]
        if not straddling:
            return [sides.unsettled() for sides in found]
        test.refine(straddling)
