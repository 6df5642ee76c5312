"""The abilities file of the scripted provider (`python -m lexpilot.scripted --abilities FILE --dataset FILE`): per
evaluated model, the probability of a right answer on each task and its run-to-run noise; for the judge, the
probability of giving the true label, per label. Read once, checked whole; every mistake is one line naming the file
and the key.

    seed = 0                  # every draw's seed: another seed, another grid with the same abilities
    noise = 0.2               # share of a model's decisions drawn afresh in each run (0: runs alike; 1: independent)

    [models."m-strong"]
    lca_complete = 0.90       # P(it predicts after a complete history): Acc_C
    lca_underspecified = 0.80 # P(it asks after an underspecified history): Acc_U
    dcg = 0.55                # P(a forced question hits a key detail of a focal point), per round
    ljp = 0.70                # P(a claim's verdict is the court's), every setup (or ljp_direct, ljp_gold, ljp_interaction)
    noise = 0.3               # optional: this model's own run-to-run noise

    [judge]                   # P(the judge gives the true label), per true label; 1 when left out
    lca_predict = 0.90        # a reply that predicts is labelled 策略一
    lca_ask = 0.85            # a reply that asks is labelled 策略二
    dcg_yes = 0.85            # sensitivity: a question that hits is judged 是
    dcg_no = 0.90             # specificity: a question that misses is judged 否
    ljp = 0.95                # a stated verdict is read as stated (or ljp_support, ljp_partial, ljp_reject)
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

if sys.version_info >= (3, 11):  # the standard library's; on 3.10 the same parser is tomli (requirements.txt)
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

from lexpilot.benchmark.records import LJP_SETUPS
from lexpilot.benchmark.vocabulary import ASKS, NO, PREDICTS, VERDICTS, YES
from lexpilot.errors import HarnessError

SETUPS = tuple(s.name for s in LJP_SETUPS)  # "direct", "interaction", "gold"
MODEL_KEYS = ("lca_complete", "lca_underspecified", "dcg")  # each model's abilities besides its LJP ones
# the judge's key of each true label, per task (the labels are the judge's words, declared in vocabulary.py)
JUDGE_KEYS = {
    "LCA": {PREDICTS: "lca_predict", ASKS: "lca_ask"},
    "DCG": {YES: "dcg_yes", NO: "dcg_no"},
    "LJP": dict(zip(VERDICTS, ("ljp_support", "ljp_partial", "ljp_reject"))),
}


@dataclass(frozen=True)
class ModelAbilities:
    """One evaluated model: P(right) per decision, and the share of its decisions drawn afresh in each run."""

    lca_complete: float
    lca_underspecified: float
    dcg: float
    ljp: dict[str, float]  # LJP setup name -> P(a claim's verdict is the court's)
    noise: float


@dataclass(frozen=True)
class Abilities:
    """The whole file: the seed, the models by id, and the judge's recall per task and true label."""

    seed: int
    models: dict[str, ModelAbilities]
    judge: dict[str, dict[str, float]] = field(default_factory=dict)  # task -> true label -> P(given as is)
    path: str = "abilities"  # where it was read from, for messages

    def recall(self, task: str, label: str) -> float:
        return self.judge.get(task, {}).get(label, 1.0)


def _share(value, where: str) -> float:
    """A probability as the file gives it: a number from 0 to 1."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise HarnessError(f"{where}: {value!r} is not a probability; give a number from 0 to 1")
    return float(value)


def _unknown(table: dict, allowed, where: str) -> None:
    extra = sorted(set(table) - set(allowed))
    if extra:
        raise HarnessError(f"{where}: unknown key {extra[0]!r}; the keys are {', '.join(allowed)}")


def _model(name: str, table, default_noise: float, where: str) -> ModelAbilities:
    """One [models."ID"] table: every ability given; the LJP ones through `ljp` or one per setup."""
    where = f"{where}: [models.{name!r}]"
    if not isinstance(table, dict):
        raise HarnessError(f"{where}: must be a table of abilities")
    setup_keys = tuple(f"ljp_{s}" for s in SETUPS)
    _unknown(table, (*MODEL_KEYS, "ljp", *setup_keys, "noise"), where)
    missing = [k for k in MODEL_KEYS if k not in table]
    missing += [k for k in setup_keys if k not in table and "ljp" not in table][:1]
    if missing:
        raise HarnessError(
            f"{where}: {missing[0]} is missing; give every ability (see the abilities file's doc)"
        )
    shares = {k: _share(table[k], f"{where} {k}") for k in MODEL_KEYS}
    ljp = {s: _share(table.get(f"ljp_{s}", table.get("ljp")), f"{where} ljp_{s}") for s in SETUPS}
    noise = _share(table.get("noise", default_noise), f"{where} noise")
    return ModelAbilities(ljp=ljp, noise=noise, **shares)


def _judge(table, where: str) -> dict[str, dict[str, float]]:
    """The [judge] table: a recall per task and true label (`ljp` for every verdict at once)."""
    where = f"{where}: [judge]"
    if not isinstance(table, dict):
        raise HarnessError(f"{where}: must be a table of probabilities")
    keys = [k for labels in JUDGE_KEYS.values() for k in labels.values()]
    _unknown(table, (*keys, "ljp"), where)
    recall = {}
    for task, labels in JUDGE_KEYS.items():
        shared = table.get(task.lower(), 1.0) if task == "LJP" else 1.0
        recall[task] = {label: _share(table.get(k, shared), f"{where} {k}") for label, k in labels.items()}
    return recall


def parse_abilities(text: str, where: str) -> Abilities:
    """The abilities in a file's text (`where` names it in messages)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise HarnessError(f"{where}: not TOML ({e})") from None
    _unknown(data, ("seed", "noise", "models", "judge"), where)
    seed = data.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise HarnessError(f"{where}: seed {seed!r} is not a whole number of 0 or more")
    noise = _share(data.get("noise", 0.0), f"{where}: noise")
    models = data.get("models")
    if not isinstance(models, dict) or not models:
        raise HarnessError(f'{where}: no [models."ID"] table; declare each evaluated model\'s abilities')
    return Abilities(
        seed,
        {name: _model(name, table, noise, where) for name, table in models.items()},
        _judge(data.get("judge", {}), where),
        where,
    )


def read_abilities(path: Path) -> Abilities:
    """The abilities file at `path`, or one line saying why not."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise HarnessError(
            f"{path}: cannot be read ({getattr(e, 'strerror', None) or e}); pass --abilities a TOML file"
        ) from None
    return parse_abilities(text, str(path))
