"""Why cases failed and what to do about it, said alike by a stage script and by the grid: each failed case with its
reason, and the advice, which never tells a user to rerun as it is what a rerun would buy again (a reply cut at its
output limit, a prompt beyond the context window: issue 54 item 2).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lexpilot.errors import ONE_SLOT, RAW_OUTPUT, CaseFailure, first_of
from lexpilot.text import counted


def advice(failures: list[CaseFailure]) -> str:
    """What to do next: rerun as it is, or first change what the failures name. An output limit is a generation
    setting the run keeps (its manifest refuses another), so a raised one needs a new run id; the server's requests
    at once are not, and the same command reruns."""
    changes = {f.change for f in failures if f.change}
    if not changes:
        return (
            f"Rerun the same command to retry {'it' if len(failures) == 1 else 'them'}; saved cases are kept."
        )
    again = sum(1 for f in failures if f.change)
    limits = sorted(c for c in changes if c.endswith("max-tokens"))
    steps = []
    if ONE_SLOT in changes:
        steps.append("send the server fewer requests at once (see why above)")
    if limits:
        steps.append(
            f"raise {' and '.join(limits)} and rerun under a new run id (--run-id, or a grid's --run-ids): a run "
            "keeps the output limits it started with"
        )
    else:
        steps.append("rerun the same command")
    said = ", then ".join(steps)
    return (
        f"{said[0].upper()}{said[1:]}. As it is, a rerun would buy the same failure for "
        f"{'it' if len(failures) == again == 1 else f'{again} of them'}"
        + ("." if limits else "; saved cases are kept.")
    )


def failure_lines(stage: str, failures: list[CaseFailure], unfinished: int = 0) -> list[str]:
    """A stage's closing lines for its failed cases: each case and why, then the count and the advice."""
    ordered = sorted(failures, key=lambda f: f.case)
    tail = f"; {counted(unfinished, 'case')} not finished" if unfinished > 0 else ""
    return [f"[{stage}] case {f.case} failed: {f.message}" for f in ordered] + [
        f"[{stage}] {counted(len(ordered), 'case')} failed ({', '.join(f.case for f in ordered)}){tail}. "
        + advice(ordered)
    ]


@dataclass
class Reason:
    """One reason cases failed for, in one stage, over the grid's cells: said once, with its count."""

    stage: str
    message: str
    change: str
    first: str  # the first case that failed for it, as the display says it: "[cell] case N failed: why"
    cells: list[str] = field(default_factory=list)  # its cells' "model run", in the order they failed
    cases: int = 0


def reason_key(stage: str, model: str, message: str) -> tuple[str, str]:
    """Failures of one stage for one reason are one entry whichever evaluated model met them and whatever it wrote:
    the cell's own model id (in 'Evaluated model 'M' at host: ...') and the invalid output quoted do not make
    another reason."""
    return stage, message.partition(RAW_OUTPUT)[0].replace(f"'{model}'", "'…'")


@dataclass
class Reasons:
    """The grid's failed cases grouped by (stage, reason), in the order the reasons were first met."""

    by_key: dict[tuple[str, str], Reason] = field(default_factory=dict)

    def add(self, stage: str, model: str, label: str, failure: CaseFailure) -> bool:
        """Count a failed case; True when its reason is new (the display says it in full then)."""
        key = reason_key(stage, model, failure.message)
        new = key not in self.by_key
        first = f"[{label}] case {failure.case} failed: {failure.message}"
        reason = self.by_key.setdefault(
            key, Reason(stage, key[1].replace("'…'", f"'{model}'"), failure.change, first)
        )
        reason.cases += 1
        run = label.removesuffix(f" {stage}")  # the line names the stage: its cells are (model, run)s
        if run not in reason.cells:
            reason.cells.append(run)
        if len(reason.cells) > 1 and key[1] != reason.message:  # met by several models: say it of each
            reason.message = key[1].replace("'…'", "(each cell's model)")
        return new

    def labels(self) -> set[str]:
        """The labels of the cells some of whose cases failed."""
        return {f"{run} {r.stage}" for r in self.by_key.values() for run in r.cells}

    @property
    def cases(self) -> int:
        return sum(r.cases for r in self.by_key.values())

    def lines(self) -> list[str]:
        """One line per reason: the stage, how many cases in how many cells, the cells, and why."""
        return [
            f"[grid] {r.stage}: {counted(r.cases, 'case')} failed in {counted(len(r.cells), 'cell')} "
            f"({', '.join(first_of(r.cells, 4))}): {r.message}"
            for r in self.by_key.values()
        ]

    def advice(self) -> str:
        """The grid's closing advice on its failed cases ("" when none failed)."""
        every = [CaseFailure("", r.message, r.change) for r in self.by_key.values() for _ in range(r.cases)]
        return advice(every) if every else ""
