"""Benchmark of the transcript viewer at the paper's scale: a scripted output of --models models × --runs runs ×
--cases cases (synthetic records with the real record format, no API), then `show_results.py --html` timed as a
process, the site's size against the JSONL it was made from, and the time until the first screen of the
overview, the case list, a case page and the comparisons is ready in headless Chromium. Every stage's records are
written, the later ones too (plain consultation, Table 4, audit, focal types, claim order).

    python -m bench.viewer [--models 10] [--runs 5] [--cases 432] [--later-models 3] [--chromium /usr/bin/chromium]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.throughput import synthetic_dataset
from categories import FOCAL_TYPES
from lexpilot.benchmark.dataset import load_dataset
from lexpilot.benchmark.records import (
    A1,
    AUDIT,
    BEHAVIOUR_DIALOGUE,
    BEHAVIOUR_PREDICTION,
    DCG,
    DIRECT_PREDICTION,
    FOCAL_TYPE_RECORDS,
    FORCE_ASK,
    GOLD_PREDICTION,
    INTERACTION,
    LCA,
    LJP_BEHAVIOUR,
    LJP_DIRECT,
    LJP_GOLD,
    LJP_INTERACTION,
    LJP_ORDER,
    PLAIN,
    PLAIN_TYPES,
    model_folder,
    new_record,
    record_line,
)
from lexpilot.benchmark.vocabulary import BEHAVIOURS
from lexpilot.settings import Role, Settings
from lexpilot.storage.manifest import build_manifest, settings_hash

ROOT = Path(__file__).resolve().parents[1]
VERDICTS = ("支持", "部分支持", "驳回")


def reply(rng: random.Random, words: int) -> str:
    return "".join(rng.choice("根据案件事实原告被告借款合同约定支持驳回证据法院认为") for _ in range(words))


def write_run(
    root: Path,
    dataset: Path,
    cases,
    sha: str,
    model: str,
    run_id: str,
    rng: random.Random,
    later: bool = True,
    skill: float = 0.0,
) -> None:
    """One run's records; with `skill`, the share of its LCA labels, DCG outcomes and verdicts that are right
    (the rest drawn at random, as every one is at 0: the draws are then those of a grid without skill)."""

    def right() -> bool:
        return skill > 0 and rng.random() < skill

    sh = _write_manifest(root, dataset, cases, sha, model, run_id)
    files = {}
    usage = {"eval": {"calls": 1, "prompt_tokens": 900, "completion_tokens": 300}}

    def save(kind, case, body, upstream=None):
        record = new_record(case.number, case.input_hash, case.cause, body, upstream or {}, usage, sh)
        files.setdefault(kind, []).append(record_line(record))  # as the checkpoint writer writes it
        return record

    # `rng` is drawn in a fixed order, case by case: a grid is the same whenever it is written
    for case in cases:
        under, comp = case.history("underspecified"), case.history("complete")
        a1, lca, labels = _lexawn_records(save, right, rng, case, under, comp)
        inter = _interaction_record(save, rng, case, under, a1, lca, labels)
        _dcg_records(save, right, rng, case, under)
        predicted = _ljp_records(save, right, rng, case, under, comp, inter)
        for kind, body in later_records(case, rng, under, predicted) if later else ():
            save(kind, case, body)
    for kind, lines in files.items():
        path = kind.path(root, run_id, model_folder(model))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"".join(lines))


def _write_manifest(root: Path, dataset: Path, cases, sha: str, model: str, run_id: str) -> str:
    """The run's folder and manifest, as a stage makes them; returns the manifest's settings hash."""
    roles = {
        r: Role(r, m, "http://127.0.0.1:1/v1", "", t)
        for r, m, t in (("eval", model, 0.7), ("user", "user-model", 0.7), ("judge", "judge-model", 0.1))
    }
    settings = Settings(run_id, dataset, root, None, roles, 8192)
    manifest = build_manifest(settings, sha, cases)
    folder = root / "runs" / run_id / model_folder(model)
    folder.mkdir(parents=True)
    (folder / "manifest.json").write_text(json.dumps(manifest, ensure_ascii=False), encoding="utf-8")
    return settings_hash(manifest)


def _lexawn_records(
    save, right, rng: random.Random, case, under: list, comp: list
) -> tuple[dict, dict, dict]:
    """LexAwN's reply after each history and the LCA judge's labels of them: (a1, lca, labels by history)."""
    a1 = save(
        A1,
        case,
        {
            "responses": {
                t: {"history": h, "response": reply(rng, 400)}
                for t, h in (("complete", comp), ("underspecified", under))
            }
        },
    )
    labels = {
        t: ("策略二" if t == "underspecified" else "策略一") if right() else rng.choice(("策略一", "策略二"))
        for t in ("complete", "underspecified")
    }
    lca = save(
        LCA,
        case,
        {
            "judgments": {
                t: {
                    "label": labels[t],
                    "true_type": t,
                    "judge_raw": [labels[t]],
                    "predicted_type": "underspecified" if labels[t] == "策略二" else "complete",
                }
                for t in labels
            }
        },
        {"a1": a1},
    )
    return a1, lca, labels


def _interaction_record(
    save, rng: random.Random, case, under: list, a1: dict, lca: dict, labels: dict
) -> dict:
    """The interaction: round 1 is LexAwN's reply; where it asked, the user answers and round 2 predicts."""
    rounds = [
        {
            "round": 1,
            "prompt": "lexawn",
            "assistant": a1["responses"]["underspecified"]["response"],
            "label": labels["underspecified"],
            "judge_raw": [labels["underspecified"]],
        }
    ]
    if labels["underspecified"] == "策略二":
        rounds[0] |= {"user_prompt": "user_standard", "user_reply": reply(rng, 80)}
        rounds.append(
            {
                "round": 2,
                "prompt": "lexawn",
                "assistant": reply(rng, 400),
                "label": "策略一",
                "judge_raw": ["策略一"],
            }
        )
    return save(
        INTERACTION,
        case,
        {
            "user_condition": "standard",
            "input_history": under,
            "rounds": rounds,
            "continued_history": under,
            "stop_reason": "judged",
            "final_response": rounds[-1]["assistant"],
            "disrupted_round": None,
            "corrected_round": None,
        },
        {"a1": a1, "LCA": lca},
    )


def _dcg_records(save, right, rng: random.Random, case, under: list) -> None:
    """Two forced questions (the first answered by the user) and the DCG judge's label of each round."""
    asked = save(
        FORCE_ASK,
        case,
        {
            "input_history": under,
            "rounds": [
                {"round": 1, "question": reply(rng, 120), "user_reply": reply(rng, 80)},
                {"round": 2, "question": reply(rng, 120)},
            ],
        },
    )
    judged = ["是", "是"] if right() else [rng.choice(("是", "否")) for _ in range(2)]
    save(
        DCG,
        case,
        {
            "rounds": [{"round": i + 1, "label": j, "judge_raw": [j]} for i, j in enumerate(judged)],
            "success": "是" in judged,
        },
        {"force_ask": asked},
    )


def _ljp_records(save, right, rng: random.Random, case, under: list, comp: list, inter: dict) -> list[str]:
    """Each setup's prediction and the verdicts extracted of its claims (Interaction-Based last, from the
    interaction's final reply); returns the Interaction-Based verdicts."""
    for setup, generation, results, history in (
        ("direct", DIRECT_PREDICTION, LJP_DIRECT, under),
        ("gold", GOLD_PREDICTION, LJP_GOLD, comp),
    ):
        g = save(
            generation, case, {"history_type": "x", "input_history": history, "response": reply(rng, 500)}
        )
        predicted = list(case.verdicts) if right() else [rng.choice(VERDICTS) for _ in case.claims]
        save(
            results,
            case,
            {
                "setup": setup,
                "claims": list(case.claims),
                "predicted": predicted,
                "gold": list(case.verdicts),
                "judge_raw": [json.dumps(predicted)],
            },
            {generation.name: g},
        )
    predicted = list(case.verdicts) if right() else [rng.choice(VERDICTS) for _ in case.claims]
    save(
        LJP_INTERACTION,
        case,
        {
            "setup": "interaction",
            "stop_reason": "judged",
            "claims": list(case.claims),
            "predicted": predicted,
            "gold": list(case.verdicts),
            "judge_raw": [json.dumps(predicted)],
        },
        {"interaction": inter},
    )
    return predicted


# a Table 4 dialogue's validation (its one fact recovered) and an audited reply found clean
_BEHAVIOUR_VALIDATION = {
    "facts": [{"id": 1, "status": "recovered", "turns": [3]}],
    "unsupported_assertion": False,
    "question_reveals_answer": False,
    "beyond_scope": False,
}
_CLEAN_AUDIT = {"over_disclosed": [], "error": False, "answered": True, "judge_raw": ['{"超范围披露": []}']}


def later_records(case, rng: random.Random, under: list[dict], predicted: list[str]) -> list[tuple]:
    """The later stages' records of one case, as their stages write them: the plain consultation and its type, Table
    4's dialogues (one attempt each), predictions and verdicts, the simulator audit, focal-point types and the
    claim-order diagnostic, so that the site holds every view."""
    turns = [
        {"role": r, "content": reply(rng, 120 if r == "assistant" else 80)}
        for _ in range(3)
        for r in ("assistant", "user")
    ]
    records = _plain_audit_focal_records(case, rng, under)
    for condition in BEHAVIOURS:
        records += _behaviour_records(case, rng, under, turns, condition)
    order = list(reversed(range(len(case.claims))))
    records += [
        (
            LJP_ORDER[setup],
            {
                "setup": setup,
                "order": order,
                "claims": list(case.claims),
                "predicted": _random_verdicts(case, rng),
                "original": predicted,
                "gold": list(case.verdicts),
                "judge_raw": ["[]"],
            },
        )
        for setup in LJP_ORDER
    ]
    return records


def _random_verdicts(case, rng: random.Random) -> list[str]:
    return [rng.choice(VERDICTS) for _ in case.claims]


def _plain_audit_focal_records(case, rng: random.Random, under: list[dict]) -> list[tuple]:
    """The plain consultation and its response type, the audit of both sources, the focal points' types."""
    return [
        (
            PLAIN["underspecified"],
            {
                "history_type": "underspecified",
                "messages": under,
                "response": reply(rng, 400),
                "sent_as": "messages",
            },
        ),
        (
            PLAIN_TYPES["underspecified"],
            {"history_type": "underspecified", "type": "premature_prediction", "judge_raw": ["过早预测"]},
        ),
        (AUDIT["dcg"], {"replies": [{"source": "DCG round 1", **_CLEAN_AUDIT}]}),
        (AUDIT["interaction"], {"replies": [{"source": "interaction round 1", **_CLEAN_AUDIT}]}),
        (
            FOCAL_TYPE_RECORDS,
            {
                "types": [
                    {"focal_point": fp, "type": t, "source": "judge", "judge_raw": [t]}
                    for fp in case.focal_points
                    for t in [rng.choice(list(FOCAL_TYPES))]
                ],
                "judge_model": "judge-model",
            },
        ),
    ]


def _behaviour_records(
    case, rng: random.Random, under: list[dict], turns: list[dict], condition: str
) -> list[tuple]:
    """One Table 4 condition: its dialogue (accepted at its first attempt), prediction and verdicts."""
    attempt = {
        "attempt": 1,
        "dialogue": turns,
        "validation": _BEHAVIOUR_VALIDATION,
        "judge_raw": [json.dumps(_BEHAVIOUR_VALIDATION)],
        "rejected": [],
    }
    return [
        (
            BEHAVIOUR_DIALOGUE[condition],
            {"condition": condition, "status": "accepted", "attempts": [attempt], "dialogue": under + turns},
        ),
        (
            BEHAVIOUR_PREDICTION[condition],
            {"condition": condition, "status": "accepted", "response": reply(rng, 500)},
        ),
        (
            LJP_BEHAVIOUR[condition],
            {
                "setup": condition,
                "status": "accepted",
                "claims": list(case.claims),
                "predicted": _random_verdicts(case, rng),
                "gold": list(case.verdicts),
                "judge_raw": ["[]"],
            },
        ),
    ]


def first_screen(chromium: str, urls: dict[str, str]) -> dict[str, float]:
    from playwright.sync_api import sync_playwright

    times = {}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        for name, url in urls.items():
            start = time.monotonic()
            page.goto(url, wait_until="load")
            # painted
            page.evaluate("new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
            times[name] = time.monotonic() - start
        browser.close()
    return times


def write_grid(
    folder: Path, models: int, runs: int, cases: int, later: int | None = None, skill_step: float = 0.0
) -> Path:
    """A synthetic dataset of `cases` cases and `models` × `runs` runs of it under folder/out, the later stages'
    records for the first `later` models (None: every model), model m right on a share m · `skill_step` of its
    answers (0: all drawn at random, the models alike); returns the dataset."""
    folder.mkdir(parents=True, exist_ok=True)
    dataset = folder / "bench.json"
    synthetic_dataset(cases, dataset)
    selected, sha = load_dataset(dataset)
    rng = random.Random(0)
    for m in range(models):
        for r in range(runs):
            write_run(
                folder / "out",
                dataset,
                selected,
                sha,
                f"model-{m}",
                f"run{r + 1}",
                rng,
                later is None or m < later,
                m * skill_step,
            )
    return dataset


def size(folder: Path, pattern: str) -> int:
    return sum(p.stat().st_size for p in folder.rglob(pattern) if p.is_file())


def grid_parser(doc: str) -> argparse.ArgumentParser:
    """The benchmarks' flags for the synthetic grid: the paper's 10 models × 5 runs × 432 cases by default."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", type=int, default=10)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--cases", type=int, default=432)
    return parser


def _show_results(tmp: Path, dataset: Path) -> tuple[subprocess.CompletedProcess, float]:
    """`show_results.py --html` on the grid under `tmp`, as a process: its result and its wall time."""
    start = time.monotonic()
    result = subprocess.run(
        [
            sys.executable,
            "show_results.py",
            "--output-root",
            str(tmp / "out"),
            "--html",
            str(tmp / "site"),
            "--dataset",
            str(dataset),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ},
    )
    return result, time.monotonic() - start


def _first_pages(site: Path) -> dict[str, str]:
    """The pages whose first screen is timed: the overview, the case list, a case page and the comparisons."""
    return {
        "overview": (site / "index.html").as_uri(),
        "case list": (site / "cases.html").as_uri(),
        "case page": (site / "case" / "0.html").as_uri(),
        "compare": (site / "compare.html").as_uri(),
    }


def main(argv=None) -> int:
    parser = grid_parser(__doc__)
    parser.add_argument(
        "--later-models",
        type=int,
        default=3,
        help="models with the later stages' records too (the "
        "paper ran Table 4 and Table 6 on three models; default 3; -1: every model)",
    )
    parser.add_argument("--chromium", default=shutil.which("chromium") or shutil.which("chromium-browser"))
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        start = time.monotonic()
        later = None if args.later_models < 0 else args.later_models
        dataset = write_grid(tmp, args.models, args.runs, args.cases, later)
        print(
            f"{args.models} models × {args.runs} runs × {args.cases} cases (later stages: "
            f"{'every model' if later is None else f'{later} models'}) written in "
            f"{time.monotonic() - start:.1f}s; JSONL {size(tmp / 'out', '*.jsonl') / 1e6:.1f} MB"
        )
        result, wall = _show_results(tmp, dataset)
        if result.returncode:
            print(result.stderr[-2000:], file=sys.stderr)
            return 1
        jsonl, site = size(tmp / "out", "*.jsonl"), size(tmp / "site", "*")
        print(
            f"show_results.py --html: {wall:.1f}s wall (whole process); site {site / 1e6:.1f} MB = "
            f"{site / jsonl:.2f} × the JSONL"
        )
        if args.chromium:
            times = first_screen(args.chromium, _first_pages(tmp / "site"))
            print(
                "first screen in headless Chromium: " + ", ".join(f"{k} {v:.2f}s" for k, v in times.items())
            )
        else:
            print("no Chromium: first-screen times not measured")
    return 0


if __name__ == "__main__":
    sys.exit(main())
