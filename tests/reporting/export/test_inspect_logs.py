"""Inspect logs of runs the stage scripts wrote: inspect_ai's own reader reads every one, and its scores, messages and
token counts equal the harness's records."""

import pytest

import export_results
from tests.helpers.optional import INSPECT, needs
from tests.helpers.runs import case_records as records
from tests.reporting.export.conftest import CASES, MAIN_STAGES, MODELS, RUNS

pytestmark = [pytest.mark.slow, needs("inspect_ai", INSPECT)]


def test_read_eval_log_reads_every_log_as_the_records_say(grid, tmp_path):
    """One log per model, run and stage; each Interaction-Based sample's score is its share of claims the extracted
    verdict gets right, its messages are the records' continued history, and each role's tokens are the sums of its
    interaction and verdict records' usage."""
    from inspect_ai.log import read_eval_log

    out = tmp_path / "export"
    argv = ["--output-root", str(grid), "--format", "inspect", "--output", str(out)]
    assert export_results.main(argv) == 0
    logs = sorted(out.glob("inspect/*/*/*.json"))
    assert len(logs) == len(MODELS) * len(RUNS) * len(MAIN_STAGES)
    for path in logs:
        log = read_eval_log(str(path))
        # LCA: a sample per history
        assert log.status == "success" and len(log.samples) == CASES * (
            2 if "_lexpilot-LCA_" in path.name else 1
        )
    for model in MODELS:
        (path,) = out.glob(f"inspect/{model}-*/r1/*_lexpilot-LJP-interaction_*.json")
        log = read_eval_log(str(path))
        interactions = records(grid, "AwN_gen", "interaction.jsonl", model, "r1")
        verdicts = records(grid, "eval_results", "LJP_interaction.jsonl", model, "r1")
        for sample in log.samples:
            verdict, interaction = verdicts[sample.id], interactions[sample.id]
            right = sum(p == g for p, g in zip(verdict["predicted"], verdict["gold"]))
            assert sample.scores["lexpilot_judge"].value == right / len(verdict["gold"])
            assert sample.target == verdict["gold"]
            assert [(m.role, m.text) for m in sample.messages] == [
                (m["role"], m["content"]) for m in interaction["continued_history"]
            ]
            for role in ("eval", "user", "judge"):
                prompt = sum(r["usage"].get(role, {}).get("prompt_tokens", 0) for r in (interaction, verdict))
                completion = sum(
                    r["usage"].get(role, {}).get("completion_tokens", 0) for r in (interaction, verdict)
                )
                if prompt:
                    used = sample.role_usage[role]
                    assert (used.input_tokens, used.output_tokens) == (prompt, completion)


def test_tokens_never_reported_are_left_out_not_zero(unreported_grid, tmp_path):
    """A case whose evaluated-model calls include one the provider reported no tokens for: its sample has no usage of
    the evaluated model (and says how many calls went unreported), and the log's total leaves that model out, for a
    sum of the others would pass for the whole; the judge's tokens stay."""
    from inspect_ai.log import read_eval_log

    root, case = unreported_grid
    out = tmp_path / "export"
    argv = ["--output-root", str(root), "--format", "inspect", "--output", str(out), "--run-id", "r1"]
    assert export_results.main([*argv, "--model", "model-a"]) == 0
    (path,) = out.glob("inspect/model-a-*/r1/*_lexpilot-LCA_*.json")
    log = read_eval_log(str(path))
    # the a1 record's tokens are on each case's first history (the other names it)
    samples = {s.id: s for s in log.samples if "tokens_counted_with" not in s.metadata}
    (unknown,) = [n for n in samples if str(n).startswith(f"{case}/")]
    assert "eval" not in samples[unknown].role_usage and "model-a" not in samples[unknown].model_usage
    assert samples[unknown].metadata["tokens_unreported_calls"] == {"eval": 1}
    assert "judge" in samples[unknown].role_usage
    assert all("eval" in s.role_usage for n, s in samples.items() if n != unknown)
    assert "model-a" not in log.stats.model_usage and log.stats.model_usage


def test_each_sample_has_the_judges_score_as_its_event(grid, tmp_path):
    """The Transcript tab has an event to show (with none, inspect view says the sample's events were removed for
    size): each Interaction-Based sample's judge score, whose value and targets are the sample's."""
    from inspect_ai.log import read_eval_log

    out = tmp_path / "export"
    argv = ["--output-root", str(grid), "--format", "inspect", "--output", str(out), "--run-id", "r1"]
    assert export_results.main([*argv, "--model", "model-c"]) == 0
    (path,) = out.glob("inspect/model-c-*/r1/*_lexpilot-LJP-interaction_*.json")
    verdicts = records(grid, "eval_results", "LJP_interaction.jsonl", "model-c", "r1")
    samples = read_eval_log(str(path)).samples
    assert samples and {s.id for s in samples} == set(verdicts)
    for sample in samples:
        (scored,) = sample.events
        assert scored.event == "score" and scored.target == verdicts[sample.id]["gold"]
        assert scored.score.value == sample.scores["lexpilot_judge"].value
