"""Runs written by hand, as the harness saves them: a manifest and records of every kind, for the metrics' tests."""

import json

from lexpilot.benchmark.records import RECORD_KINDS, SCHEMA_VERSION
from lexpilot.benchmark.records import model_folder as model_dirname

C, U = "complete", "underspecified"
CASES = {"A1": "离婚纠纷", "A2": "法定继承纠纷", "B1": "相邻关系纠纷", "B2": "返还原物纠纷"}
SETTINGS = {
    "dataset_sha256": "d",
    "code_hash": "c",
    "prompt_hash": "p",
    "user_condition": "standard",
    "generation": {"temperature": 0.7, "judge_temperature": 0.1, "max_tokens": 8192, "n": 1},
}


KIND_OF_FILE = {k.file: k for k in RECORD_KINDS}


def saved(file_name: str, body: dict) -> dict:
    """A record as the harness saves it in that file: every field of its kind, `body` over them."""
    kind = KIND_OF_FILE[file_name]
    return (
        {name: None for name in kind.fields}
        | {"schema_version": SCHEMA_VERSION, "input_hash": "h", "upstream_hash": {}, "usage": {}}
        | body
    )


def make_run(root, run_id, model="m", lca=None, dcg=None, ljp=None, cases=CASES, **overrides):
    """Write a run: lca = {case: (pred complete, pred underspecified)}, dcg = {case: success},
    ljp = {setup: {case: [(gold, predicted), ...]}}."""
    folder = model_dirname(model)
    manifest = {
        **SETTINGS,
        "run_id": run_id,
        "selected_cases": list(cases),
        "models": {"eval": {"model": model, "endpoint_host": "h"}, "user": {}, "judge": {}},
        **overrides,
    }
    (root / "runs" / run_id / folder).mkdir(parents=True)
    (root / "runs" / run_id / folder / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")

    def write(name, records):
        path = root / "eval_results" / run_id / folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            "".join(json.dumps(saved(name, r), ensure_ascii=False) + "\n" for r in records), encoding="utf-8"
        )

    if lca is not None:
        write(
            "LCA_results.jsonl",
            [
                {
                    "case_number": n,
                    "cause_of_action": cases[n],
                    "judgments": {
                        C: {"true_type": C, "predicted_type": pc},
                        U: {"true_type": U, "predicted_type": pu},
                    },
                }
                for n, (pc, pu) in lca.items()
            ],
        )
    if dcg is not None:
        write(
            "DCG_results.jsonl",
            [{"case_number": n, "cause_of_action": cases[n], "success": s} for n, s in dcg.items()],
        )
    for setup, by_case in (ljp or {}).items():
        write(
            f"LJP_{setup}.jsonl",
            [
                {
                    "case_number": n,
                    "cause_of_action": cases[n],
                    "claims": [str(i) for i in range(len(p))],
                    "gold": [g for g, _ in p],
                    "predicted": [x for _, x in p],
                }
                for n, p in by_case.items()
            ],
        )
