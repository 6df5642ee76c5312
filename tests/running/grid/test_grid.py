"""The grid on many machines: output roots produced separately and copied together report the same tables as
one root produced in place, whether each machine ran stage scripts by hand or `run_grid.py --shard K/N`."""

import json
import shutil
import subprocess

import pytest

import show_results
from lexpilot.scripted.provider import ScriptedProvider
from tests.helpers.datasets import sample_cases, write_dataset
from tests.helpers.grids import MODELS, grid, grid_environment
from tests.helpers.paths import ROOT
from tests.helpers.stages import Harness
from tests.helpers.warm import run as warm_run

STAGES = ("LexAwN", "DCG", "direct", "gold", "interaction")


def gather(roots, into):
    """The machines' output roots copied into one, as `rsync -a machine:out/ gathered/` would."""
    for root in roots:
        shutil.copytree(root, into, dirs_exist_ok=True)
    return into


def report(root, dataset, capsys) -> list:
    """show_results.py's groups for one output root (with intervals, so the runs' pairing is compared too)."""
    assert (
        show_results.main(
            [
                "--output-root",
                str(root),
                "--dataset",
                str(dataset),
                "--format",
                "json",
                "--ci",
                "--resamples",
                "50",
            ]
        )
        == 0
    )
    return json.loads(capsys.readouterr().out)["groups"]


@pytest.mark.slow
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
    capsys.readouterr()
    one, gathered = (
        report(root, dataset, capsys)
        for root in (in_place.root, gather([h.root for h in machines.values()], tmp_path / "gathered"))
    )
    assert one == gathered and len(one) == 2


@pytest.mark.slow
def test_two_shards_cover_every_cell_once_and_report_as_one_unsharded_run(tmp_path, capsys, warm):
    """ "`--shard 1/2` and `--shard 2/2` together cover every cell once. Their gathered roots report the same tables
    as one unsharded run." And "`--shard` with `--dry-run` lists the cells of a shard": the same on every machine,
    whatever order --models gives."""
    dataset = write_dataset(tmp_path / "two.json", sample_cases()[:2])
    with ScriptedProvider() as evaluated, ScriptedProvider() as judge:
        env = grid_environment(evaluated, judge)
        listed = []
        for k, models in ((1, MODELS), (2, MODELS[::-1])):
            argv = grid(tmp_path / "dry", dataset, "--shard", f"{k}/2", "--dry-run")
            argv[argv.index("--models") + 1 : argv.index("--models") + 4] = models
            # two fresh interpreters, as two machines, each with its own string hashing (forks of the warm one
            # would share its seed, and a listing that followed a set's order would agree by chance)
            seeded = env | {"PYTHONHASHSEED": str(k)}
            done = subprocess.run(argv, cwd=ROOT, env=seeded, capture_output=True, text=True, timeout=60)
            assert done.returncode == 0, done.stderr
            listed.append(done.stdout.split("\n\n", 1)[0].splitlines())  # its cells, then its quote
        assert not set(listed[0]) & set(listed[1]) and len(listed[0]) == len(listed[1]) == 15
        stages = ("LexAwN", "DCG", "LJP direct", "LJP gold", "LJP interaction")
        assert set(listed[0]) | set(listed[1]) == {
            f"{m} run{r} {s}" for m in MODELS for r in (1, 2) for s in stages
        }
        for k in (1, 2):
            done = warm_run(warm, grid(tmp_path / f"machine-{k}", dataset, "--shard", f"{k}/2"), ROOT, env)
            assert done.returncode == 0, done.stderr
        whole = warm_run(warm, grid(tmp_path / "whole", dataset), ROOT, env)
        assert whole.returncode == 0, whole.stderr
    one, gathered = (
        report(root, dataset, capsys)
        for root in (
            tmp_path / "whole",
            gather([tmp_path / f"machine-{k}" for k in (1, 2)], tmp_path / "gathered"),
        )
    )
    assert one == gathered and len(one) == 3
