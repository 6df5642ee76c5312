"""Every stage of a run the stage scripts wrote is exported (the plain consultation, Table 4's dialogues, the
simulator audit, focal-point types, the claim-order diagnostic and the User Model probes beside the main stages): each
EEE record passes every-eval-ever's own validation, each Inspect log reads back with the messages, scores and tokens
of the harness's records, the numbers stated are show_results.py's, a diagnostic says it is outside the paper's
protocol, and a re-judged run names what served each role. Expected values are read from the JSONL records here."""

import json
from pathlib import Path

import numpy as np
import pytest

import export_results
from tests.helpers.runs import case_records
from tests.reporting.export.conftest import CASES

pytestmark = pytest.mark.slow
pytest.importorskip(
    "every_eval_ever", reason="every-eval-ever is not installed (it needs Python 3.12 or later)"
)
pytest.importorskip(
    "inspect_ai", reason="inspect-ai is not installed (pip install -r requirements-optional.txt)"
)

VERDICTS = ("驳回", "部分支持", "支持")  # the ordinal scale, lowest first
# the export's stage -> its labels' file and the files they label, (folder, file) each
FILES = {
    "LCA": ("eval_results/LCA_results.jsonl", "AwN_gen/a1.jsonl"),
    "DCG": ("eval_results/DCG_results.jsonl", "Force_ask_gen/force_ask.jsonl"),
    "LJP_direct": ("eval_results/LJP_direct.jsonl", "Force_judge_gen/a1_direct.jsonl"),
    "LJP_gold": ("eval_results/LJP_gold.jsonl", "Force_judge_gen/a1_force_judge.jsonl"),
    "LJP_interaction": ("eval_results/LJP_interaction.jsonl", "AwN_gen/interaction.jsonl"),
    "plain_underspecified": (
        "eval_results/plain_types_underspecified.jsonl",
        "Plain_gen/plain_underspecified.jsonl",
    ),
    **{
        f"T4_{b}": (
            f"eval_results/LJP_{b}.jsonl",
            f"Behaviour_gen/prediction_{b}.jsonl",
            f"Behaviour_gen/dialogues_{b}.jsonl",
        )
        for b in ("targeted", "off_target")
    },
    "audit_dcg": ("eval_results/simulator_audit_dcg.jsonl", "Force_ask_gen/force_ask.jsonl"),
    "audit_interaction": ("eval_results/simulator_audit_interaction.jsonl", "AwN_gen/interaction.jsonl"),
    "focal_types": ("eval_results/focal_types.jsonl", "eval_results/DCG_results.jsonl"),
    "LJP_order_direct": ("eval_results/LJP_order_direct.jsonl", "Force_judge_gen/a1_direct.jsonl"),
    "LJP_order_gold": ("eval_results/LJP_order_gold.jsonl", "Force_judge_gen/a1_force_judge.jsonl"),
    "LJP_order_interaction": ("eval_results/LJP_order_interaction.jsonl", "AwN_gen/interaction.jsonl"),
    "probes": ("eval_results/probe_dcg.jsonl", "Probe_gen/probe_replies.jsonl"),
}
DIAGNOSTICS = {
    "audit_dcg",
    "audit_interaction",
    "LJP_order_direct",
    "LJP_order_gold",
    "LJP_order_interaction",
    "probes",
}


def jsonl(root: Path, where: str, run: str = "r1") -> dict:
    top, name = where.split("/")
    return case_records(root, top, name, "model-a", run)


def pairs(messages: list[dict]) -> list[tuple[str, str]]:
    return [(m["role"], m["content"]) for m in messages]


def dcg_turns(record: dict) -> list[tuple[str, str]]:
    turns = pairs(record["input_history"])
    for r in record["rounds"]:
        turns += [("assistant", r["question"])] + ([("user", r["user_reply"])] if r.get("user_reply") else [])
    return turns


def ljp_turns(record: dict) -> list[tuple[str, str]]:
    if "continued_history" in record:
        return pairs(record["continued_history"])
    return pairs(record["input_history"]) + [("assistant", record["response"])]


def share(predicted: list, reference: list) -> float:
    return sum(p == g for p, g in zip(predicted, reference)) / len(reference)


def consultations(stage: str, label: dict, *sources: dict) -> dict[str, tuple[list, float]]:
    """sample id -> (its messages, its score), as the records hold them."""
    case = label["case_number"]
    if stage == "LCA":
        return {
            f"{case}/{h}": (
                pairs(sources[0]["responses"][h]["history"])
                + [("assistant", sources[0]["responses"][h]["response"])],
                float(j["predicted_type"] == j["true_type"]),
            )
            for h, j in label["judgments"].items()
        }
    if stage == "probes":
        if not sources[0]["probed"]:
            return {}
        return {
            f"{case}/{c}": (
                [("assistant", r["question"]), ("user", r["reply"])],
                float(label["labels"].get(c, {}).get("label") == "是"),
            )
            for c, r in sources[0]["replies"].items()
        }
    return {case: one_consultation(stage, label, *sources)}


def one_consultation(stage: str, label: dict, *sources: dict) -> tuple[list, float]:
    if stage == "DCG":
        return dcg_turns(sources[0]), float(label["success"])
    if stage.startswith("LJP_order"):
        return ljp_turns(sources[0]), share(label["predicted"], label["original"])
    if stage.startswith("LJP"):
        return ljp_turns(sources[0]), share(label["predicted"], label["gold"])
    if stage.startswith("plain"):
        turns = pairs(sources[0]["messages"]) + [("assistant", sources[0]["response"])]
        return turns, float(label["type"] == "deficiency_recognition")
    if stage.startswith("T4"):
        return pairs(sources[1]["dialogue"]) + [("assistant", sources[0]["response"])], share(
            label["predicted"], label["gold"]
        )
    if stage.startswith("audit"):
        turns = dcg_turns(sources[0]) if stage == "audit_dcg" else ljp_turns(sources[0])
        clean = [not (r["over_disclosed"] or r["error"]) for r in label["replies"]]
        return turns, (sum(clean) / len(clean) if clean else 1.0)
    assert stage == "focal_types"
    return [("user", "\n".join(t["focal_point"] for t in label["types"]))], float(sources[0]["success"])


def expected(root: Path, run: str = "r1") -> dict[str, dict]:
    """stage -> sample id -> (messages, score, role -> (prompt, completion) tokens of its records)."""
    found: dict[str, dict] = {}
    for stage, (labels, *others) in FILES.items():
        sources = [jsonl(root, where, run) for where in others]
        for case, label in jsonl(root, labels, run).items():
            records = [label, *(s[case] for s in sources)]
            tokens = {
                role: tuple(
                    sum(r["usage"].get(role, {}).get(k, 0) for r in records)
                    for k in ("prompt_tokens", "completion_tokens")
                )
                for role in ("eval", "user", "judge")
            }
            made = consultations(stage, label, *records[1:])
            for n, (sample, (messages, score)) in enumerate(made.items()):
                found.setdefault(stage, {})[sample] = (messages, score, tokens if n == 0 else {})
    return found


def export(root: Path, out: Path, *extra: str) -> int:
    argv = ["--output-root", str(root), "--format", "eee", "inspect", "--output", str(out), *extra]
    return export_results.main(argv)


def eee_rows(out: Path) -> list[dict]:
    return [
        json.loads(line)
        for path in sorted(out.glob("data/lexpilot/*/*/*_samples.jsonl"))
        for line in path.read_text(encoding="utf-8").splitlines()
    ]


def aggregate(out: Path) -> dict:
    (path,) = out.glob("data/lexpilot/*/*/*.json")
    return json.loads(path.read_text(encoding="utf-8"))


def test_every_record_of_every_stage_passes_the_packages_own_validation(stages_root, tmp_path):
    """One aggregate and one instance file per run, each valid to every-eval-ever's validator (datastore checks
    included); every stage is there, each consultation with the messages, score and evaluated-model tokens of the
    records, its labels the judge's (llm_judge) but for the focal-point types the dataset gives."""
    from every_eval_ever.validator.validate import validate_file

    out = tmp_path / "export"
    assert export(stages_root, out, "--run-id", "r1") == 0
    files = sorted(str(p.relative_to(out)) for p in out.glob("data/**/*") if p.is_file())
    for name in files:
        report = validate_file(
            out / name,
            repo_path=name,
            available_files=set(files),
            read_repo_file=lambda path: (out / path).read_text(encoding="utf-8"),
            run_semantic_checks=True,
        )
        assert report.valid, (name, report.errors)
    want = expected(stages_root)
    rows: dict[str, dict] = {}
    for row in eee_rows(out):
        rows.setdefault(row["evaluation_name"].removeprefix("lexpilot."), {})[row["sample_id"]] = row
    assert set(rows) == set(FILES)
    for stage, samples in want.items():
        assert set(rows[stage]) == set(samples), stage
        for sample, (messages, score, tokens) in samples.items():
            row = rows[stage][sample]
            assert row["interaction_type"] == "multi_turn"
            assert pairs(row["messages"]) == messages, (stage, sample)
            assert row["evaluation"]["score"] == pytest.approx(score), (stage, sample)
            if tokens.get("eval", (0, 0)) != (0, 0):
                used = row["token_usage"]
                assert (used["input_tokens"], used["output_tokens"]) == tokens["eval"], (stage, sample)
            methods = {a["extraction_method"] for a in row["answer_attribution"]}
            assert methods <= ({"dataset", "llm_judge"} if stage == "focal_types" else {"llm_judge", "none"})
    assert len(rows["LCA"]) == 2 * CASES


def test_read_eval_log_reads_every_stages_log_as_the_records_say(stages_root, tmp_path):
    """One Inspect log per stage; inspect_ai's reader reads each, and every sample's messages, score and each role's
    tokens are the records'."""
    from inspect_ai.log import read_eval_log

    out = tmp_path / "export"
    assert export(stages_root, out, "--run-id", "r1") == 0
    want = expected(stages_root)
    logs = sorted(out.glob("inspect/*/r1/*.json"))
    assert len(logs) == len(FILES)
    for path in logs:
        log = read_eval_log(str(path))
        stage = log.eval.task.removeprefix("lexpilot/")
        assert log.status == "success" and {s.id for s in log.samples} == set(want[stage])
        for s in log.samples:
            messages, score, tokens = want[stage][s.id]
            assert [(m.role, m.text) for m in s.messages] == messages, (stage, s.id)
            assert s.scores["lexpilot_judge"].value == pytest.approx(score)
            for role, (prompt, completion) in tokens.items():
                if prompt:
                    used = s.role_usage[role]
                    assert (used.input_tokens + (used.input_tokens_cache_read or 0), used.output_tokens) == (
                        prompt,
                        completion,
                    ), (stage, s.id, role)


def qwk(gold: list[str], predicted: list[str]) -> float:
    """Quadratic weighted kappa on the fixed three-point scale, by hand."""
    k = len(VERDICTS)
    observed = np.zeros((k, k))
    for g, p in zip(gold, predicted):
        observed[VERDICTS.index(g), VERDICTS.index(p)] += 1
    weights = np.subtract.outer(np.arange(k), np.arange(k)) ** 2 / (k - 1) ** 2
    chance = np.outer(observed.sum(1), observed.sum(0)) / observed.sum()
    return 1 - (weights * observed).sum() / (weights * chance).sum()


def test_the_numbers_stated_are_the_records(stages_root, tmp_path):
    """The aggregate states, for the later stages, what show_results.py reports: Table 6's response-type shares,
    Table 4's QWK, the audit's flag rates, Figure 4's DCG accuracy by focal-point type, the claim-order agreement and
    the probes' DCG acceptance per condition; each computed here from the records."""
    out = tmp_path / "export"
    assert export(stages_root, out, "--run-id", "r1") == 0
    stated = {
        r["evaluation_result_id"]: r["score_details"]["score"] for r in aggregate(out)["evaluation_results"]
    }
    plain = [r["type"] for r in jsonl(stages_root, FILES["plain_underspecified"][0]).values()]
    for kind in (
        "deficiency_recognition",
        "conditional_advice",
        "unconditional_advice",
        "premature_prediction",
    ):
        assert stated[f"plain_underspecified.{kind}.Overall"] == pytest.approx(plain.count(kind) / len(plain))
    for b in ("targeted", "off_target"):
        verdicts = jsonl(stages_root, FILES[f"T4_{b}"][0]).values()
        gold = [g for r in verdicts for g in r["gold"]]
        assert stated[f"T4_{b}.qwk.Overall"] == pytest.approx(
            qwk(gold, [p for r in verdicts for p in r["predicted"]])
        )
    replies = [r for a in jsonl(stages_root, FILES["audit_interaction"][0]).values() for r in a["replies"]]
    assert stated["audit_interaction.non_answer.Overall"] == pytest.approx(
        sum(not r["answered"] for r in replies) / len(replies)
    )
    dcg, focal = jsonl(stages_root, FILES["DCG"][0]), jsonl(stages_root, FILES["focal_types"][0])
    names = {"主体身份类": "Subject Identity", "归责逻辑类": "Liability Allocation"}
    for chinese, english in names.items():
        typed = [n for n, r in focal.items() if chinese in {t["type"] for t in r["types"]}]
        if typed:
            accuracy = np.mean([dcg[n]["success"] for n in typed])
            assert stated[f"focal_types.dcg_accuracy: {english}.Overall"] == pytest.approx(accuracy)
    order = [r for r in jsonl(stages_root, FILES["LJP_order_gold"][0]).values() if len(r["order"]) > 1]
    claims = [(a, b) for r in order for a, b in zip(r["original"], r["predicted"])]
    assert stated["LJP_order_gold.agreement.Overall"] == pytest.approx(np.mean([a == b for a, b in claims]))
    assert stated["LJP_order_gold.claims.Overall"] == len(claims)
    labels = [
        r["labels"]["B"]["label"]
        for r in jsonl(stages_root, FILES["probes"][0]).values()
        if "B" in r["labels"]
    ]
    assert stated["probes.dcg_accepted.B"] == pytest.approx(labels.count("是") / len(labels))


def test_a_diagnostic_outside_the_papers_protocol_says_so(stages_root, tmp_path):
    """The audit, the claim-order diagnostic and the probes say in every instance's metadata, every result's details
    and their Inspect log's metadata that they are outside the paper's protocol; the paper's stages say nothing so."""
    from inspect_ai.log import read_eval_log

    out = tmp_path / "export"
    assert export(stages_root, out, "--run-id", "r1") == 0
    for row in eee_rows(out):
        stage = row["evaluation_name"].removeprefix("lexpilot.")
        assert ("outside the paper's protocol" in row["metadata"].get("protocol", "")) == (
            stage in DIAGNOSTICS
        )
    for result in aggregate(out)["evaluation_results"]:
        said = result["metric_config"]["additional_details"].get("protocol", "")
        assert ("outside the paper's protocol" in said) == (
            result["evaluation_result_id"].split(".")[0] in DIAGNOSTICS
        )
    for path in out.glob("inspect/*/r1/*.json"):
        log = read_eval_log(str(path), header_only=True)
        said = log.eval.metadata.get("stage_protocol", "")
        assert ("outside the paper's protocol" in said) == (
            log.eval.task.removeprefix("lexpilot/") in DIAGNOSTICS
        )


def test_a_rejudged_run_names_what_served_each_role(stages_root, tmp_path):
    """A run made by rejudge.py (its generations copied from its source, its verdicts new) names in its aggregate and
    its logs the ids that served each role, as its records' served_calls say: the evaluated model's and the User
    Model's from the copied generations, the judge's from the new verdicts."""
    from inspect_ai.log import read_eval_log

    out = tmp_path / "export"
    assert export(stages_root, out, "--run-id", "r1-again") == 0
    served: dict[str, set] = {}
    for where in ("AwN_gen/a1.jsonl", "AwN_gen/interaction.jsonl", "eval_results/LJP_direct.jsonl"):
        for record in jsonl(stages_root, where, "r1-again").values():
            for call in record["served_calls"]:
                served.setdefault(call["role"], set()).add(call["served"])
    settings = aggregate(out)["evaluation_results"][0]["generation_config"]["additional_details"]
    for role in ("eval", "user", "judge"):
        assert settings[f"{role}_served"] == ", ".join(sorted(served[role]))
    for path in out.glob("inspect/*/r1-again/*.json"):
        metadata = read_eval_log(str(path), header_only=True).eval.metadata
        assert "not recorded" not in {metadata[f"{role}_served"] for role in ("eval", "user", "judge")}


def test_a_run_rejudged_by_another_judge_names_that_judge_alone(stages_root, tmp_path):
    """r1 re-judged by rejudge.py with another judge: the labels of LCA, DCG and the LJP setups are that judge's, and
    the aggregate, each metric and each instance name it alone as what served the judge (no swap claimed); the
    Interaction-Based rounds' in-dialogue judge calls, copied with the dialogue from r1, are stated apart, per
    instance, as r1's."""
    import rejudge
    from lexpilot.scripted.provider import ScriptedProvider
    from tests.helpers.stages import Harness

    with ScriptedProvider() as provider, pytest.MonkeyPatch.context() as monkeypatch:
        h = Harness(tmp_path, provider, monkeypatch)
        argv = ("--model", "model-a", "--limit", str(CASES), "--from-run", "r1", "--run-id", "rj")
        assert h.run_stage(rejudge.STAGE, *argv, "--judge-model", "other-judge") == 0
    out = tmp_path / "export"
    assert export(stages_root, out, "--run-id", "rj") == 0
    details = aggregate(out)["source_metadata"]["additional_details"]
    assert "served by" not in details["protocol"]
    assert "judge other-judge (the paper's: DeepSeek-R1)" in details["protocol"]
    for result in aggregate(out)["evaluation_results"]:
        (judge,) = result["metric_config"]["llm_scoring"]["judges"]
        assert judge["model_info"]["additional_details"]["served_model"] == "other-judge"
    assert result["generation_config"]["additional_details"]["judge_served"] == "other-judge"
    dialogue_judge = {
        case: [c["served"] for c in record["served_calls"] if c["role"] == "judge"]
        for case, record in jsonl(stages_root, "AwN_gen/interaction.jsonl", "rj").items()
    }
    rows = eee_rows(out)
    assert {r["evaluation_name"] for r in rows} >= {
        "lexpilot.LCA",
        "lexpilot.DCG",
        "lexpilot.LJP_interaction",
    }
    for row in rows:
        assert row["metadata"]["judge"] == {"requested": "other-judge", "served": ["other-judge"]}
        if row["evaluation_name"] == "lexpilot.LJP_interaction" and dialogue_judge[row["sample_id"]]:
            assert row["metadata"]["judge_in_labelled_records"] == {
                "served": sorted(set(dialogue_judge[row["sample_id"]])),
                "records": "interaction.jsonl",
                "run": "r1",
            }
    assert any(dialogue_judge.values())
