"""The grid on many machines: output roots produced separately and copied together report the same tables as
one root produced in place."""
import json
import shutil

import show_results
from tests.conftest import Harness, sample_cases, write_dataset

STAGES = ("LexAwN", "DCG", "direct", "gold", "interaction")


def test_roots_made_apart_and_gathered_report_what_one_root_reports(tmp_path, provider, monkeypatch, capsys):
    dataset = write_dataset(tmp_path / "three.json", sample_cases()[:3])
    in_place = Harness(tmp_path / "in_place", provider, monkeypatch, dataset)
    machines = {m: Harness(tmp_path / m, provider, monkeypatch, dataset) for m in ("machine-1", "machine-2")}
    for model, machine in (("model-a", "machine-1"), ("model-b", "machine-2")):
        for run_id in ("run1", "run2"):
            for h in (in_place, machines[machine]):
                h.run_id = run_id
                for stage in STAGES:
                    assert h.run(stage, "--model", model) == 0
    gathered = tmp_path / "gathered"
    for h in machines.values():
        shutil.copytree(h.root, gathered, dirs_exist_ok=True)  # as `rsync -a machine:out/ gathered/` would
    capsys.readouterr()
    reports = []
    for root in (in_place.root, gathered):
        assert show_results.main(["--output-root", str(root), "--dataset", str(dataset), "--format", "json",
                                  "--ci", "--resamples", "50"]) == 0
        reports.append(json.loads(capsys.readouterr().out)["groups"])
    assert reports[0] == reports[1] and len(reports[0]) == 2
