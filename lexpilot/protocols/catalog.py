"""Every stage run per evaluated model and run from the dataset alone, by the entry point that runs it: the grid
quote's `--stages` takes these names. The paper's grid is what the README's loop runs (LexAwN_gen.py, eval_DCG.py,
eval_LJP.py); the validation stages come after. Re-judging (it needs a source run), the probe study (an expert
file, no evaluated model) and eval_LCA.py (it judges LexAwN's saved responses again) are not run per model and run
from the dataset alone: they are OTHER_STAGES. ENTRY_POINTS is every stage script and what it runs, the one list the
tests' guards (code hash, prompts) read.
"""

from __future__ import annotations

import dataclasses

from lexpilot.errors import HarnessError
from lexpilot.protocols.audit import AUDIT_STAGE
from lexpilot.protocols.behaviour import BEHAVIOUR_STAGE
from lexpilot.protocols.consultation import LCA_STAGE, LEXAWN_STAGE
from lexpilot.protocols.dcg import DCG_STAGE
from lexpilot.protocols.focal_types import FOCAL_TYPE_STAGE
from lexpilot.protocols.ljp import DIRECT_STAGE, GOLD_STAGE, INTERACTION_LJP_STAGE
from lexpilot.protocols.order import ORDER_STAGE
from lexpilot.protocols.plain import PLAIN_STAGE
from lexpilot.protocols.probes import PROBE_STAGE
from lexpilot.protocols.rejudging import REJUDGE_STAGE
from lexpilot.protocols.steps import Stage

# entry point (without .py) -> the stages it runs, in order
PAPER_GRID: dict[str, tuple[Stage, ...]] = {
    "LexAwN_gen": (LEXAWN_STAGE,),
    "eval_DCG": (DCG_STAGE,),
    "eval_LJP": (DIRECT_STAGE, GOLD_STAGE, INTERACTION_LJP_STAGE),
}
VALIDATION_STAGES: dict[str, tuple[Stage, ...]] = {
    "eval_plain": (PLAIN_STAGE,),
    "eval_LJP_behaviour": (BEHAVIOUR_STAGE,),
    "audit_simulator": (AUDIT_STAGE,),
    "eval_focal_types": (FOCAL_TYPE_STAGE,),
    "eval_LJP_order": (ORDER_STAGE,),  # a diagnostic outside the paper's protocol
}
SINGLE_LJP = {
    "eval_LJP_direct": (DIRECT_STAGE,),
    "eval_LJP_gold": (GOLD_STAGE,),
    "eval_LJP_interaction": (INTERACTION_LJP_STAGE,),
}
GRID_STAGES = {**PAPER_GRID, **SINGLE_LJP, **VALIDATION_STAGES}
STAGE_SETS = {"paper": tuple(PAPER_GRID), "all": (*PAPER_GRID, *VALIDATION_STAGES)}
# what quote_grid.py quotes and run_grid.py runs without --stages: the same, so a dry run is the quote
DEFAULT_STAGE_SET = "paper"
OTHER_STAGES = {"eval_LCA": (LCA_STAGE,), "rejudge": (REJUDGE_STAGE,), "user_probes": (PROBE_STAGE,)}
# eval_LJP.py by hand runs the three setups as its own stages: its code is what their code hash compares, with the same
# options for each, so no --user-condition (a non-ideal run's Interaction-Based LJP is eval_LJP_interaction.py's)
BY_HAND = {
    "eval_LJP": tuple(
        dataclasses.replace(stage, script="eval_LJP.py", user_condition=False)
        for stage in PAPER_GRID["eval_LJP"]
    )
}
ENTRY_POINTS: dict[str, tuple[Stage, ...]] = {**GRID_STAGES, **BY_HAND, **OTHER_STAGES}


def stages_named(names: list[str]) -> list[Stage]:
    """The stages of entry points named with or without `.py`, or of a set (`paper`, `all`), each once, in the
    order given; an unknown name is a HarnessError naming the names there are."""
    chosen: list[Stage] = []
    for name in names:
        name = name.removesuffix(".py")
        scripts = STAGE_SETS.get(name, (name,))
        for script in scripts:
            if script not in GRID_STAGES:
                raise HarnessError(
                    f"unknown stage {name!r}; choose from {', '.join([*STAGE_SETS, *GRID_STAGES])}"
                )
            chosen += [s for s in GRID_STAGES[script] if s not in chosen]
    return chosen
