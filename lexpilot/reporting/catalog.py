"""Every table a report can hold, registered once and in the order a report shows them: the builder that makes it,
from which of the report's inputs, and the option that asks for it (none: it comes with the records it shows).

Each builder declares the identities it makes, with the paper's table and the decimals (tables/table.py's
`declares`), so a new table is a builder that declares its kind and one entry in `REPORT` (or `ELSEWHERE`, for a
table another script prints). The options' hints and the tables JSON carries beside the metrics are read from
here; docs/results.md lists the identities by hand, and a test holds that list to `KINDS`.
"""

from __future__ import annotations

import argparse
import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from lexpilot.reporting.scoring.groups import Group, classes_present
from lexpilot.reporting.statistics.bootstrap import Bootstrap
from lexpilot.reporting.statistics.consistency import consistency_table, judge_noise_table
from lexpilot.reporting.statistics.corrected_power import corrected_power_table
from lexpilot.reporting.statistics.corrected_table import corrected_tables, matched_labels
from lexpilot.reporting.statistics.rankings import power_table, ranking_tables
from lexpilot.reporting.tables.audit import audit_tables
from lexpilot.reporting.tables.claim_order import order_table
from lexpilot.reporting.tables.complexity import figure_3_tables
from lexpilot.reporting.tables.focal_types import figure_4_tables
from lexpilot.reporting.tables.formats import HEADLINE
from lexpilot.reporting.tables.paper import (
    behaviour_tables,
    comparison_table,
    fault_table,
    interaction_gain_table,
    non_ideal_table,
    paired_setups_table,
    results_tables,
    runs_table,
)
from lexpilot.reporting.tables.plain import plain_tables
from lexpilot.reporting.tables.rejudged import judge_sensitivity_tables
from lexpilot.reporting.tables.table import Builder, Kind, Table
from lexpilot.reporting.tables.table_4 import table_4
from lexpilot.reporting.tables.usage import usage_tables
from lexpilot.reporting.validation.agreement import agreement_table, interval_table
from lexpilot.reporting.validation.expert_labels import Matched
from lexpilot.reporting.validation.label_plan import label_plan_table
from lexpilot.reporting.validation.probe_study import table_13


@dataclass(frozen=True)
class Inputs:
    """What a report's tables are built from: the options, the groups, the resample matrices, the files read."""

    args: argparse.Namespace
    groups: list[Group]  # every group of runs with a complete task, re-judged copies included
    boot: Bootstrap | None  # the intervals in the cells (--ci, --compare)
    shared: Bootstrap  # every statistic's one resample matrix
    complexity: dict
    prices: dict | None
    compared: tuple[Group, Group] | None
    usage_groups: list[Group]  # every run, those with no complete task included: they were paid for

    @property
    def root(self) -> Path:
        return self.args.output_root.resolve()

    @functools.cached_property
    def paper(self) -> list[Group]:
        """The groups the paper's tables show: the runs as judged; re-judged copies too with --include-rejudged or
        when --run-id names one of them (the judge tables always show them)."""
        named = set(self.args.run_id or ())
        if self.args.include_rejudged or any(
            r.run_id in named for g in self.groups if g.rejudged for r in g.runs
        ):
            return self.groups
        return [g for g in self.groups if not g.rejudged]

    @functools.cached_property
    def standard(self) -> list[Group]:
        """The paper's groups of the standard user (the paper's every table but Table 15 and the behaviour's)."""
        return [g for g in self.paper if g.condition == "standard"]

    @functools.cached_property
    def labels(self) -> Matched | None:
        """The expert labels of --corrected matched to the runs, read once for the corrected tables and the
        corrected ranking (None without --corrected)."""
        if self.args.corrected is None:
            return None
        return matched_labels(self.standard, self.args.corrected, self.root)


def always(inputs: Inputs) -> bool:
    return True


@dataclass(frozen=True)
class Entry:
    """A builder's place in the report."""

    builder: Builder  # declared with its tables' kinds (tables/table.py's `declares`)
    arguments: Callable[[Inputs], tuple]  # its arguments, from the report's inputs
    option: str = ""  # the option that asks for its tables ("": they come with the records they show)
    wanted: Callable[[Inputs], bool] = always
    rides_along: bool = False  # a statistic: `--format json` carries it beside the metrics when asked for

    @property
    def kinds(self) -> tuple[Kind, ...]:
        return self.builder.kinds


def _comparison_arguments(i: Inputs) -> tuple:
    assert i.compared is not None, "its tables are asked for with --compare only"
    return (*i.compared, i.boot)


def _ranking_arguments(i: Inputs) -> tuple:
    by_class = classes_present(i.groups) if i.args.by_class else None
    return i.groups, i.shared, i.args.alpha, by_class, i.args.permutations, i.labels


REPORT: tuple[Entry, ...] = (
    Entry(runs_table, lambda i: (i.paper,)),
    Entry(results_tables, lambda i: (i.standard, i.boot)),
    Entry(interaction_gain_table, lambda i: (i.standard,)),
    Entry(paired_setups_table, lambda i: (i.standard, i.boot), "--ci", lambda i: i.boot is not None),
    Entry(behaviour_tables, lambda i: (i.paper,)),
    Entry(non_ideal_table, lambda i: (i.paper, i.boot)),
    Entry(fault_table, lambda i: (i.paper,)),
    Entry(table_4, lambda i: (i.standard, i.boot)),
    Entry(figure_4_tables, lambda i: (i.standard,)),
    Entry(figure_3_tables, lambda i: (i.standard, i.complexity), "--complexity FILE"),
    Entry(plain_tables, lambda i: (i.standard, i.boot)),
    Entry(audit_tables, lambda i: (i.paper, i.boot)),
    Entry(judge_sensitivity_tables, lambda i: (i.groups, i.root, i.shared)),
    Entry(order_table, lambda i: (i.groups, i.root)),
    Entry(comparison_table, _comparison_arguments, "--compare A B", lambda i: i.compared is not None),
    Entry(ranking_tables, _ranking_arguments, "--rank", lambda i: i.args.rank, rides_along=True),
    Entry(power_table, lambda i: (i.groups, i.shared, i.args.alpha), "--power", lambda i: i.args.power, True),
    Entry(
        corrected_power_table,
        lambda i: (i.groups, i.shared, i.labels, i.args.alpha),
        "--power --corrected LABELS",
        lambda i: i.args.power and i.args.corrected is not None,
        True,
    ),
    Entry(consistency_table, lambda i: (i.groups,), "--consistency", lambda i: i.args.consistency, True),
    Entry(
        judge_noise_table,
        lambda i: (i.groups, HEADLINE, i.shared),
        "--consistency",
        lambda i: i.args.consistency,
        True,
    ),
    Entry(
        corrected_tables,
        lambda i: (i.standard, i.labels, i.args.seed),
        "--corrected LABELS",
        lambda i: i.args.corrected is not None,
        True,
    ),
    Entry(
        usage_tables,
        lambda i: (i.usage_groups, i.prices),
        "--usage",
        lambda i: i.args.usage or bool(i.prices),
    ),
)
# the tables other scripts print: Table 12 (judge_agreement.py), Table 13 and the probe study (user_probes.py)
ELSEWHERE = (agreement_table, interval_table, table_13, label_plan_table)

KINDS: dict[str, Kind] = {k.id: k for b in (*(e.builder for e in REPORT), *ELSEWHERE) for k in b.kinds}
TABLE_OPTIONS = {k.id: e.option for e in REPORT if e.option for k in e.kinds}
RIDES_ALONG = {k.id for e in REPORT if e.rides_along for k in e.kinds}


def build(inputs: Inputs) -> list[Table]:
    """Every table the report holds, in the catalog's order."""
    tables = []
    for entry in REPORT:
        if entry.wanted(inputs):
            made = entry.builder(*entry.arguments(inputs))
            tables += made if isinstance(made, list) else [made] if made is not None else []
    return tables
