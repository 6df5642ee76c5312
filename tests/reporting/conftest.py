"""A finished run of every stage, made once per test worker, which the reports' tests break copies of."""

import pytest

from lexpilot.scripted.provider import ScriptedProvider
from tests.helpers.stages import Harness


@pytest.fixture(scope="session")
def finished_run(tmp_path_factory):
    """A finished run of every stage on two sample cases, made once (the tests of three files use it); tests work on
    copies of it."""
    tmp_path = tmp_path_factory.mktemp("finished")
    with ScriptedProvider() as provider, pytest.MonkeyPatch.context() as monkeypatch:
        h = Harness(tmp_path, provider, monkeypatch)
        for stage in ("LexAwN", "DCG", "direct", "gold", "interaction"):
            assert h.run(stage, "--limit", "2") == 0
    return h.root


@pytest.fixture
def saved_run(finished_run, tmp_path, monkeypatch, provider):
    import shutil

    h = Harness(tmp_path, provider, monkeypatch)
    shutil.copytree(finished_run, h.root)
    return lambda *_: h


@pytest.fixture(scope="session")
def ranked_dcg(tmp_path_factory):
    """Three models' DCG runs with expert labels (tests/helpers/rankings.py THREE_MODELS), reported once with
    --rank --corrected --ci and both the site and the figures: (the site's folder, the figures' folder, the CSV the
    report printed of the main and corrected tables)."""
    from tests.helpers.rankings import ranked_dcg_report

    tmp = tmp_path_factory.mktemp("ranked_dcg")
    shown = ["--html", str(tmp / "site"), "--plot", str(tmp / "plots"), "--table", "main", "corrected"]
    _, _, out = ranked_dcg_report(tmp, *shown)
    return tmp / "site", tmp / "plots", out
