"""The scripted provider answers a model id as another (`served_as`, switchable while it runs; `--served-as
REQUESTED=SERVED[@N]` from the command line) and echoes a system fingerprint, in synchronous, streamed and batch
replies alike: what a run's records then count per role."""

import pytest

from lexpilot.benchmark.records import GOLD_PREDICTION, LJP_GOLD
from lexpilot.scripted.__main__ import main
from lexpilot.scripted.served import ServedAs


def counts(records: list[dict], role: str, kind: str) -> dict[str, int]:
    """A kind of served count ("served", "fingerprint") the records keep for a role, summed."""
    total: dict[str, int] = {}
    for record in records:
        for key, n in record["usage"].get(role, {}).items():
            if key.startswith(kind + ":"):
                total[key.split(":", 1)[1]] = total.get(key.split(":", 1)[1], 0) + n
    return total


@pytest.mark.parametrize("mode", [(), ("--stream",), ("--batch", "--batch-poll", "0.05")])
def test_a_model_id_is_answered_as_another_with_a_fingerprint_in_every_mode(harness, mode):
    harness.provider.served_as["eval-model"] = "eval-model-2026-07-01"
    harness.provider.fingerprint = "fp_3a9"
    assert harness.run("gold", "--limit", "2", *mode) == 0
    assert counts(harness.records(GOLD_PREDICTION), "eval", "served") == {"eval-model-2026-07-01": 2}
    assert counts(harness.records(GOLD_PREDICTION), "eval", "fingerprint") == {"fp_3a9": 2}
    # the judge's id is answered as itself
    assert counts(harness.records(LJP_GOLD), "judge", "served") == {"DeepSeek-R1": 2}


def test_served_as_parses_its_switch_and_refuses_what_is_not_one(capsys):
    assert ServedAs.parse("deepseek-chat=deepseek-v4-flash") == ServedAs("deepseek-chat", "deepseek-v4-flash")
    assert ServedAs.parse("DeepSeek-R1=r2@5") == ServedAs("DeepSeek-R1", "r2", 5)
    for bad in ("deepseek-chat", "=x", "a=b@x"):
        assert main(["--served-as", bad]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "--served-as" in err and "REQUESTED=SERVED" in err
