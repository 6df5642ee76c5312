"""The abilities file: each model's abilities and noise and the judge's recall per label are read as written (the
LJP ones through one key or per setup, the judge's left out as 1), and every mistake is one line naming the file
and the key; the provider's command line refuses --abilities without its dataset, and prints the expected metrics."""

import pytest

from lexpilot.errors import HarnessError
from lexpilot.scripted.__main__ import main
from lexpilot.scripted.abilities import parse_abilities, read_abilities
from tests.helpers.paths import SAMPLE

GOOD = """
seed = 7
noise = 0.2
[models."a"]
lca_complete = 0.9
lca_underspecified = 0.8
dcg = 0.5
ljp = 0.6
ljp_gold = 0.75
[models."b"]
lca_complete = 1
lca_underspecified = 0
dcg = 0.1
ljp_direct = 0.2
ljp_gold = 0.3
ljp_interaction = 0.4
noise = 1.0
[judge]
dcg_yes = 0.85
ljp = 0.9
ljp_partial = 0.5
"""


def test_a_file_is_read_as_written():
    abilities = parse_abilities(GOOD, "f.toml")
    a, b = abilities.models["a"], abilities.models["b"]
    assert abilities.seed == 7
    assert (a.lca_complete, a.lca_underspecified, a.dcg, a.noise) == (0.9, 0.8, 0.5, 0.2)
    assert a.ljp == {"direct": 0.6, "interaction": 0.6, "gold": 0.75}
    assert b.ljp == {"direct": 0.2, "interaction": 0.4, "gold": 0.3} and b.noise == 1.0
    assert abilities.judge["DCG"] == {"是": 0.85, "否": 1.0}
    assert abilities.judge["LCA"] == {"策略一": 1.0, "策略二": 1.0}
    assert abilities.judge["LJP"] == {"支持": 0.9, "部分支持": 0.5, "驳回": 0.9}


@pytest.mark.parametrize(
    "change, said",
    [
        (
            ("dcg = 0.5", "dcg = 1.5"),
            "f.toml: [models.'a'] dcg: 1.5 is not a probability; give a number from 0 to 1",
        ),
        (("dcg = 0.5\n", ""), "f.toml: [models.'a']: dcg is missing"),
        (("ljp = 0.6\n", ""), "f.toml: [models.'a']: ljp_direct is missing"),
        (("dcg_yes", "dcg_yess"), "f.toml: [judge]: unknown key 'dcg_yess'"),
        (("seed = 7", "seed = -1"), "f.toml: seed -1 is not a whole number of 0 or more"),
        (("noise = 0.2", "noise = true"), "f.toml: noise: True is not a probability"),
        (('[models."a"]', '[model."a"]'), "f.toml: unknown key 'model'"),
        (("seed = 7", "seed = = 7"), "f.toml: not TOML"),
    ],
)
def test_every_mistake_is_one_line_naming_the_file_and_the_key(change, said):
    with pytest.raises(HarnessError) as caught:
        parse_abilities(GOOD.replace(*change), "f.toml")
    assert str(caught.value).startswith(said) and "\n" not in str(caught.value)


def test_a_file_without_models_or_unreadable_is_refused(tmp_path):
    with pytest.raises(HarnessError, match=r"^f.toml: no \[models.\"ID\"\] table"):
        parse_abilities("seed = 1\n", "f.toml")
    with pytest.raises(HarnessError, match="cannot be read"):
        read_abilities(tmp_path / "missing.toml")


def test_the_provider_refuses_abilities_without_a_dataset_in_one_line(tmp_path, capsys):
    (tmp_path / "a.toml").write_text(GOOD, encoding="utf-8")
    assert main(["--abilities", str(tmp_path / "a.toml"), "--port", "0"]) == 2
    assert main(["--dataset", str(tmp_path / "a.toml"), "--port", "0"]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        "scripted provider: --abilities needs --dataset FILE: the dataset the runs use",
        "scripted provider: --dataset is read with --abilities only; give both, or neither",
    ]


def test_the_provider_prints_each_models_expected_metrics_true_and_judged(tmp_path, capsys):
    (tmp_path / "a.toml").write_text(GOOD, encoding="utf-8")
    assert main(["--abilities", str(tmp_path / "a.toml"), "--dataset", str(SAMPLE), "--expected"]) == 0
    lines = capsys.readouterr().out.splitlines()
    # model a: a round hits with 0.5, is passed with 0.85 when it hits and never when it misses
    assert lines[0].split() == ["model", "metric", "true", "judged"]
    assert ["a", "DCG", "accuracy", f"{1 - 0.5**2:.3f}", f"{1 - (1 - 0.5 * 0.85) ** 2:.3f}"] in [
        x.split() for x in lines
    ]
