"""The record kinds the viewer shows, each named from the record catalog (benchmark/records.py): a run's transcript
on a case page is in parts (the page's "Show" choice), each declaring the kinds its sections read, and the sections
are handed those alone (`part_records`: any other is a KeyError). A kind of the catalog that no part shows is in
NOT_SHOWN with the reason; tests/test_declared_once.py holds both to the catalog (every kind shown or said why
not, no kind the catalog lacks). The case list's columns name theirs in case_list.py's OUTCOME_COLUMNS.
"""

from __future__ import annotations

from dataclasses import dataclass

from lexpilot.benchmark.records import (
    A1,
    AUDIT,
    BEHAVIOUR_DIALOGUE,
    BEHAVIOUR_PREDICTION,
    DCG,
    FOCAL_TYPE_RECORDS,
    FORCE_ASK,
    INTERACTION,
    INTERACTION_LABELS,
    LCA,
    LJP_BEHAVIOUR,
    LJP_ORDER,
    LJP_SETUPS,
    PLAIN,
    PLAIN_TYPES,
    PROBE_DCG,
    PROBE_REPLIES,
    RecordKind,
)


@dataclass(frozen=True)
class Part:
    """One part of a run's transcript on a case page: its title in the page's "Show" choice, the kinds it shows."""

    title: str
    kinds: tuple[RecordKind, ...]


# in the order of the page (the protocol's, then the later stages')
PARTS = {
    "lexawn": Part("LexAwN and LCA", (A1, LCA)),
    # the User Model's replies with the simulator audit's verdict on each
    "dcg": Part("DCG", (FORCE_ASK, DCG, AUDIT["dcg"])),
    # a re-judged run's round labels (interaction_labels) beside the original judge's
    "interaction": Part("Interaction", (INTERACTION, INTERACTION_LABELS, AUDIT["interaction"])),
    # each setup's prediction (the interaction's final response) and its verdicts
    "ljp": Part("LJP", tuple(dict.fromkeys(k for s in LJP_SETUPS for k in (s.generation, s.verdicts)))),
    "plain": Part("Plain consultation", (*PLAIN.values(), *PLAIN_TYPES.values())),
    "table4": Part(
        "Table 4 dialogues",
        (*BEHAVIOUR_DIALOGUE.values(), *BEHAVIOUR_PREDICTION.values(), *LJP_BEHAVIOUR.values()),
    ),
    "focal": Part("Focal-point types", (FOCAL_TYPE_RECORDS,)),
    "probes": Part("Probe study", (PROBE_REPLIES, PROBE_DCG)),
    "order": Part("Claim order", tuple(LJP_ORDER.values())),
}
# kind name -> why no part shows it: none today, every kind of the catalog is on the case page
NOT_SHOWN: dict[str, str] = {}
SHOWN = tuple(dict.fromkeys(kind for part in PARTS.values() for kind in part.kinds))


class PartRecords(dict):
    """One part's records (kind name -> case number -> record): every kind the part declares, empty where the run
    has none, and no other: asking for another, by [] or by get, is a KeyError (a section reads what its part
    declares, so that the declaration is what the page shows)."""

    def __missing__(self, name):
        raise KeyError(f"{name!r}: a record kind this part does not declare (reporting/site/parts.py)")

    def get(self, name, default=None):
        return self[name]


def part_records(records: dict, part: str) -> PartRecords:
    """The records a part's sections read, out of all of a run's (`records`, kind name -> case -> record)."""
    return PartRecords({kind.name: records.get(kind.name) or {} for kind in PARTS[part].kinds})
