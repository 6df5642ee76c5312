"""The stages the export carries, declared once: for each, its name in the export, the records of its labels and of
what they label, how a case becomes instances, the numbers its aggregate states (read from the run's scoring, as
show_results.py reports them: never computed a second time), its prompts, and, for a diagnostic outside the paper's
protocol, what it is. Every other module of the export reads this table."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from lexpilot.benchmark.categories import FOCAL_TYPES
from lexpilot.benchmark.records import (
    A1,
    AUDIT,
    BEHAVIOUR_DIALOGUE,
    BEHAVIOUR_PREDICTION,
    DCG,
    FOCAL_TYPE_RECORDS,
    FORCE_ASK,
    INTERACTION,
    LCA,
    LJP_BEHAVIOUR,
    LJP_ORDER,
    LJP_SETUPS,
    PLAIN,
    PLAIN_TYPES,
    PROBE_DCG,
    PROBE_REPLIES,
    SETUP,
    RecordKind,
)
from lexpilot.benchmark.vocabulary import BEHAVIOURS, HISTORY_TYPES
from lexpilot.reporting.export import later_instances as later
from lexpilot.reporting.export.instances import Instance, dcg_instances, lca_instances, ljp_instances
from lexpilot.reporting.scoring.metrics import PLAIN_TYPE_ORDER
from lexpilot.reporting.scoring.runs import OVERALL, MetricKey, Run, saved_records
from lexpilot.reporting.scoring.scoring import AUDITED
from lexpilot.reporting.validation.judges import order_agreement
from lexpilot.reporting.validation.probe_study import dcg_acceptance

PROPORTION, KAPPA, DIFFERENCE, COUNT = "proportion", "kappa", "difference", "count"


class Value(NamedTuple):
    """One number a run's aggregate states for a stage: its metric and part (a class, Overall, a condition), the
    number, its unit, and the key of the run's scoring it was read from (None: a diagnostic's own summary, which has
    no bootstrap)."""

    metric: str
    part: str
    value: float
    unit: str
    key: MetricKey | None
    lower_is_better: bool = False


Measure = Callable[[Run, Path], list[Value]]


@dataclass(frozen=True)
class ExportedStage:
    """A stage the export carries. `task`: its name in the export (and, where `scored`, the task show_results.py
    scores it as, whose presence in the run's scoring says it is reported); `verdicts`: its labels' records, whose
    file says it ran and whose time names its Inspect log; `sources`: the records its labels are of, one each per
    case, given to `build` after the label's; `metrics`: the metrics its instances' scores are about (the first is
    the one each counts toward); `measure`: every number its aggregate states; `prompts`: the evaluated model's and
    the judge's (benchmark/prompts.py's names; None: it sends none); `diagnostic`: outside the paper's protocol, what
    it is."""

    task: str
    title: str
    verdicts: RecordKind
    sources: tuple[RecordKind, ...]
    build: Callable[..., list[Instance]]
    metrics: tuple[str, ...]
    measure: Measure
    prompts: tuple[str | None, str | None]
    scored: bool = True
    diagnostic: str = ""
    # the stage whose instance holds the tokens of this stage's first round (the Interaction-Based dialogue's round 1
    # is LCA's reply to the underspecified history, reused, not asked again: a1.jsonl counts it, on LCA's instance)
    first_round_with: str = ""

    def reported(self, run: Run, root: Path) -> bool:
        """Whether show_results.py reports the stage for the run: its task scored, or a diagnostic's records there."""
        if self.scored:
            return self.task in run.tasks
        return self.verdicts.path(root, run.run_id, run.folder).is_file() and all(
            kind != DCG or "DCG" in run.tasks for kind in self.sources
        )


LOWER_IS_BETTER = {"premature_prediction", "over_disclosure", "error", "non_answer", "unresolved", "effect"}
UNITS = {"qwk": KAPPA, "qwk_resolved": KAPPA, "clean_qwk": KAPPA, "kappa": KAPPA, "effect": DIFFERENCE}


def scored(family: str, metrics: tuple[str, ...], named: dict[str, str] | None = None) -> Measure:
    """The run's scoring of a family of metrics, each under its own name (or `named`'s), overall and per class."""

    def measure(run: Run, root: Path) -> list[Value]:
        return [
            Value(name, key.part, value, UNITS.get(name, PROPORTION), key, name in LOWER_IS_BETTER)
            for key, value in run.metrics.items()
            if key.family == family and key.name in metrics and value is not None
            for name in [(named or {}).get(key.name, key.name)]
        ]

    return measure


def joined(*measures: Measure) -> Measure:
    return lambda run, root: [value for measure in measures for value in measure(run, root)]


def counted(name: str, key: MetricKey) -> Measure:
    """A count the run's scoring keeps (Table 4's unresolved cases, the clean cases)."""

    def measure(run: Run, root: Path) -> list[Value]:
        value = run.metrics.get(key)
        return [] if value is None else [Value(name, key.part, value, COUNT, key, name in LOWER_IS_BETTER)]

    return measure


def focal_values(run: Run, root: Path) -> list[Value]:
    """Figure 4: DCG accuracy per focal-point type, and the focal points per type and class."""
    found = []
    for key, value in run.metrics.items():
        if key.family == "DCG by focal type" and value is not None:
            found.append(Value(f"dcg_accuracy: {key.name}", OVERALL, value, PROPORTION, key))
        if key.family == "focal points" and value is not None:
            found.append(Value(f"focal_points: {key.name}", key.part, value, COUNT, key))
    return found


def order_values(setup: str) -> Measure:
    """The claim-order table's row (validation/judges.order_agreement): claims, agreement, κ, control, effect."""

    def measure(run: Run, root: Path) -> list[Value]:
        found = order_agreement(saved_records(run, root, LJP_ORDER[setup])) or {}
        units = {"claims": COUNT, "kappa": KAPPA, "effect": DIFFERENCE}
        return [
            Value(name, OVERALL, float(value), units.get(name, PROPORTION), None, name in LOWER_IS_BETTER)
            for name, value in found.items()
            if value is not None
        ]

    return measure


def probe_values(run: Run, root: Path) -> list[Value]:
    """The DCG judge's acceptance of the probe questions per condition (Table 13's DCG+ column, over every probed
    case of the run rather than the experts' items)."""
    records = saved_records(run, root, PROBE_DCG).values()
    accepted = dcg_acceptance(
        (c, str(j.get("label", ""))) for r in records for c, j in (r.get("labels") or {}).items()
    )
    return [Value("dcg_accepted", condition, rate, PROPORTION, None) for condition, rate in accepted.items()]


AUDIT_METRICS = ("over_disclosure", "error", "non_answer")
# an audit's task -> the task resting on its replies, and that task's metric on the clean cases (scoring.AUDITED)
CLEAN = {audit: (task, f"clean_{metric}") for task, (audit, metric) in AUDITED.items()}
OUTSIDE = "a diagnostic outside the paper's protocol"


def main_stages() -> tuple[ExportedStage, ...]:
    """LCA, DCG and the three LJP setups (Tables 2 and 3): what --verify recomputes."""
    lca_metrics = ("macro_f1", "acc_c", "acc_u")
    return (
        ExportedStage(
            "LCA",
            "Legal Completeness Assessment",
            LCA,
            (A1,),
            lca_instances,
            lca_metrics,
            scored("LCA", lca_metrics),
            ("lexawn", "judge_lca"),
        ),
        ExportedStage(
            "DCG",
            "Detail Completion Guidance",
            DCG,
            (FORCE_ASK,),
            dcg_instances,
            ("accuracy",),
            scored("DCG", ("accuracy",)),
            ("force_ask", "judge_dcg"),
        ),
        *(
            ExportedStage(
                s.task,
                f"Legal Judgment Prediction, {s.title}",
                s.verdicts,
                (s.generation,),
                ljp_instances(s.task, s.reply_field),
                ("qwk", "accuracy"),
                scored(s.task, ("qwk", "accuracy")),
                ("force_judge" if s.name != "interaction" else "lexawn", "judge_ljp"),
                first_round_with="LCA" if s.name == "interaction" else "",
            )
            for s in LJP_SETUPS
        ),
    )


def later_stages() -> tuple[ExportedStage, ...]:
    """The plain consultation (Table 6), Table 4's dialogues and the simulator audit: tasks show_results.py scores."""
    plain = tuple(
        ExportedStage(
            f"plain_{t}",
            f"Plain consultation ({t} history)",
            PLAIN_TYPES[t],
            (PLAIN[t],),
            later.plain_instances(f"plain_{t}"),
            PLAIN_TYPE_ORDER,
            scored(f"plain_{t}", PLAIN_TYPE_ORDER),
            (None, "judge_response_type"),
        )
        for t in HISTORY_TYPES
    )
    behaviour = tuple(
        ExportedStage(
            f"T4_{b}",
            f"Table 4, {b.replace('_', '-')} dialogues",
            LJP_BEHAVIOUR[b],
            (BEHAVIOUR_PREDICTION[b], BEHAVIOUR_DIALOGUE[b]),
            later.behaviour_instances(f"T4_{b}"),
            ("qwk",),
            joined(
                scored(f"T4_{b}", ("qwk",)),
                scored(f"T4r_{b}", ("qwk",), {"qwk": "qwk_resolved"}),
                counted("unresolved", MetricKey("T4 unresolved", b)),
            ),
            (f"behaviour_{b}", "judge_ljp"),
        )
        for b in BEHAVIOURS
    )
    audit = tuple(
        ExportedStage(
            f"audit_{source}",
            f"Simulator audit of the User Model's replies ({source})",
            AUDIT[source],
            (FORCE_ASK if source == "dcg" else INTERACTION,),
            later.audit_instances(f"audit_{source}", source),
            AUDIT_METRICS,
            joined(
                scored(f"audit_{source}", AUDIT_METRICS),
                scored("clean", (CLEAN[f"audit_{source}"][0],), dict([CLEAN[f"audit_{source}"]])),
                counted("clean_cases", MetricKey("clean cases", CLEAN[f"audit_{source}"][0])),
            ),
            ("user_standard", "judge_simulator_audit"),
            diagnostic=f"{OUTSIDE}: the judge's audit of the User Model's replies (Table 13's criteria)",
        )
        for source in AUDIT
    )
    return plain + behaviour + audit


def diagnostic_stages() -> tuple[ExportedStage, ...]:
    """Focal-point types (Figure 4), the claim-order diagnostic and the User Model probes."""
    focal = ExportedStage(
        "focal_types",
        "Focal-point types (Figure 4)",
        FOCAL_TYPE_RECORDS,
        (DCG,),
        later.focal_type_instances,
        tuple(f"dcg_accuracy: {label}" for label in FOCAL_TYPES.values()),
        focal_values,
        (None, "judge_focal_type"),
        scored=False,
    )
    order = tuple(
        ExportedStage(
            kind.name,
            f"Claim order, {SETUP[setup].title}",
            kind,
            (SETUP[setup].generation,),
            later.order_instances(kind.name, setup),
            ("agreement",),
            order_values(setup),
            (None, "judge_ljp"),
            scored=False,
            diagnostic=f"{OUTSIDE}: the LJP extraction judge asked again with each case's claims shuffled "
            "(eval_LJP_order.py)",
        )
        for setup, kind in LJP_ORDER.items()
    )
    probes = ExportedStage(
        "probes",
        "User Model probes (Appendix E.3.2)",
        PROBE_DCG,
        (PROBE_REPLIES,),
        later.probe_instances,
        ("dcg_accepted",),
        probe_values,
        (None, "judge_dcg"),
        scored=False,
        diagnostic=f"{OUTSIDE}: the User Model asked the probe file's questions (user_probes.py), the DCG judge "
        "on A-C",
    )
    return (focal, *order, probes)


MAIN_STAGES = main_stages()
STAGES = MAIN_STAGES + later_stages() + diagnostic_stages()
STAGE = {s.task: s for s in STAGES}
MAIN_TASKS = tuple(s.task for s in MAIN_STAGES)  # what --verify recomputes (Tables 2 and 3)
