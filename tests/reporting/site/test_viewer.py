"""The transcript viewer (show_results.py --html): a static site tested in a real browser (the distribution's
Chromium driven by Playwright); untrusted text stays text."""

import os
import shutil

import pytest

import show_results
from lexpilot.scripted.replies import ASK, PREDICT
from tests.helpers.datasets import sample_cases, write_dataset
from tests.helpers.stages import Harness

HOSTILE = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2"></textarea><b>粗体</b>'
RLO = "\u202e反向"  # a right-to-left override never closed
CHROMIUM = os.environ.get("LEXPILOT_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")


def hostile(kind, prompt, body):
    if kind == "lexawn":
        return (PREDICT if "示例民初1号" not in prompt else ASK) + HOSTILE + RLO
    if kind == "user":
        return "我们自2097年3月起分居至今已满两年了。" + HOSTILE  # a key detail of the first sample case
    return None


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """Two models on four sample cases, one replying with markup; the site written once."""
    from lexpilot.scripted.provider import ScriptedProvider

    tmp = tmp_path_factory.mktemp("site")
    with ScriptedProvider(hostile) as provider, pytest.MonkeyPatch.context() as monkeypatch:
        h = Harness(tmp, provider, monkeypatch, write_dataset(tmp / "four.json", sample_cases()[:4]))
        for model in ("model-a", "model-b"):
            for stage in ("LexAwN", "DCG", "direct", "gold", "interaction"):
                assert h.run(stage, "--model", model) == 0
    assert show_results.main(["--output-root", str(h.root), "--html", str(tmp / "site")]) == 0
    return tmp / "site"


@pytest.mark.slow
def test_the_site_is_self_contained_and_escapes_everything(site):
    files = list(site.rglob("*"))
    assert (
        (site / "index.html").exists()
        and (site / "cases.html").exists()
        and len(list(site.glob("case/*.html"))) == 4
    )
    for path in files:
        if path.is_file():
            text = path.read_text(encoding="utf-8")
            assert "<script>window.__pwned" not in text and 'onerror="window.__pwned' not in text
            assert "http://" not in text and "https://" not in text  # nothing from outside, no CDN
    case_page = (site / "case" / "0.html").read_text(encoding="utf-8")
    assert "&lt;script&gt;window.__pwned = 1&lt;/script&gt;" in case_page


@pytest.mark.slow
def test_the_site_in_a_real_browser(site, open_page, tmp_path):
    page = open_page(1280)
    page.goto((site / "index.html").as_uri())
    assert "Main results" in page.inner_text("body")
    # follow a table cell of model-b to the cases behind it
    page.click("text=Main results")  # the heading exists
    link = page.locator("h3:has-text('Main results') + table tr:has(td:text-is('model-b')) a").first
    link.click()
    page.wait_for_url("**/cases.html#*")
    assert page.input_value("#group") == "model-b"  # the row's group: its runs, not every run of the model
    assert page.inner_text("#count") == "4 of 8 shown"
    page.select_option("#class", "Family")
    families = sum(
        1
        for c in sample_cases()[:4]
        if c["cause_of_action"] in ("离婚纠纷", "离婚后财产纠纷", "婚约财产纠纷", "抚养纠纷", "法定继承纠纷")
    )
    assert page.inner_text("#count") == f"{families} of 8 shown"
    page.select_option("#class", "")
    page.fill("#text", "示例民初1号")
    assert page.inner_text("#count") == "1 of 8 shown"
    page.click("#rows a")
    page.wait_for_url("**/case/*.html#run=*")
    body = page.inner_text("body")
    assert "window.__pwned = 1" in body and "<b>粗体</b>" in body  # shown as text
    assert page.evaluate("window.__pwned") is None  # and nothing ran
    assert page.locator("mark").count() > 0  # a key detail in a User Model reply is highlighted
    page.check("#side")
    assert page.locator("#runs").get_attribute("class") == "grid"
    visible = page.locator("section.run:visible")
    assert visible.count() == 2
    shot = tmp_path / "case.png"
    page.screenshot(path=str(shot))
    from matplotlib.image import imread  # matplotlib is declared; it reads a PNG as an array

    grey = imread(shot)[..., :3].mean(axis=2) * 255  # a PNG's channels as 0..1
    assert grey.min() < 100 < grey.max()  # not blank
    assert not page.errors


@pytest.mark.slow
def test_every_message_is_its_own_bidi_isolate(site, open_page):
    """ "An unclosed right-to-left override in a reply reorders the rest of its block. Isolate each
    message". Each message's text is an isolate with its direction from its own text; the role label before it
    stays where it is, left of the text, in a message holding the override."""
    page = open_page(1280)
    page.goto((site / "case" / "0.html").as_uri())
    texts = page.locator(".msg .text")
    assert texts.count() > 0
    assert page.evaluate(
        "[...document.querySelectorAll('.msg .text')].every(e => getComputedStyle(e).unicodeBidi"
        " === 'isolate' && e.dir === 'auto')"
    )
    overridden = page.locator(".msg:has(.text:text-matches('反向'))").first
    label, text = overridden.locator("b").first.bounding_box(), overridden.locator(".text").bounding_box()
    assert label["x"] <= text["x"] + 1


def partial_script(failing: dict):
    """The scripted provider of a partial run: the extraction judge's reply cut at its output limit for one case's
    claims while `failing["gold"]` names them, every DCG judge reply cut while `failing["DCG"]`."""

    def script(kind, prompt, body):
        cut = {"content": "", "finish_reason": "length"}  # a reply cut at its output limit fails its case
        if kind == "ljp_judge" and failing.get("gold") and failing["gold"] in prompt:
            return cut
        if kind == "dcg_judge" and failing.get("DCG"):
            return cut
        return None

    return script


@pytest.fixture(scope="module")
def partial(tmp_path_factory):
    """Runs of only some stages, on three sample cases. model-a: LexAwN, LJP Direct and LJP
    Gold-Standard, the second case failing in Gold-Standard; model-b: LexAwN and DCG, every case failing in DCG (a
    stage that ran and saved no record). No run ran Interaction-Based LJP, Table 4, the plain consultation or the
    audit."""
    from lexpilot.scripted.provider import ScriptedProvider

    tmp = tmp_path_factory.mktemp("partial")
    failing: dict = {}
    with ScriptedProvider(partial_script(failing)) as provider, pytest.MonkeyPatch.context() as monkeypatch:
        h = Harness(tmp, provider, monkeypatch, write_dataset(tmp / "three.json", sample_cases()[:3]))
        for stage in ("LexAwN", "direct"):
            assert h.run(stage, "--model", "model-a") == 0
        failing["gold"] = next(iter(sample_cases()[1]["result_dict"]))  # the second case's first claim
        # without --keep-going a failed case stops the stage, and whether the third was done depended on timing
        assert h.run("gold", "--model", "model-a", "--keep-going") != 0
        failing.clear()
        assert h.run("LexAwN", "--model", "model-b") == 0
        failing["DCG"] = True
        assert h.run("DCG", "--model", "model-b", "--keep-going") != 0
    assert not list(h.root.glob("eval_results/r1/model-b-*/DCG_results.jsonl"))  # no record: yet it ran
    assert show_results.main(["--output-root", str(h.root), "--html", str(tmp / "site")]) == 0
    return tmp / "site"


def case_list_rows(page) -> dict:
    """(model, case) -> the row's cells by column key, as the case list shows them, and its outcome tags."""
    keys = page.locator("#cases th").evaluate_all("ths => ths.map(th => th.dataset.key)")
    rows = {}
    for tr in page.locator("#rows tr").all():
        cells = dict(zip(keys, tr.locator("td").all_inner_texts()))
        tags = tr.locator("td").nth(keys.index("tags")).locator("span.tag:not(.bad)").all_inner_texts()
        rows[(cells["label"].split(" · ")[0], cells["case"])] = cells | {"tags": tags}
    return rows


@pytest.mark.slow
def test_a_partial_run_tags_only_the_cases_that_failed(partial, open_page):
    """ "The viewer tags every row 'unresolved or failed', including cases that did not fail". A case
    is tagged only when a stage that ran for its run failed it; a stage not run for a run says "not run"; the case
    list has no column of a stage no run shown ran."""
    from lexpilot.reporting.site.case_list import NOT_RUN, UNRESOLVED

    page = open_page(1400)
    page.goto((partial / "cases.html").as_uri())
    keys = page.locator("#cases th").evaluate_all("ths => ths.map(th => th.dataset.key)")
    # DCG stays: model-b ran it (and failed every case); no run ran Interaction-Based LJP, Table 4, plain or audit
    assert keys == [
        "case",
        "cause",
        "class",
        "label",
        "tags",
        "lca_c",
        "lca_u",
        "dcg",
        "direct",
        "gold",
        "stop",
    ] + ["questions"]
    rows = case_list_rows(page)
    first, second, third = (c["case_number"] for c in sample_cases()[:3])
    assert len(rows) == 6
    # model-a: the second case failed in Gold-Standard; the other two failed nothing that ran, DCG was not run
    assert UNRESOLVED in rows[("model-a", second)]["tags"] and rows[("model-a", second)]["gold"] == "–"
    for case in (first, third):
        assert UNRESOLVED not in rows[("model-a", case)]["tags"], case
        assert "/" in rows[("model-a", case)]["gold"] and "/" in rows[("model-a", case)]["direct"]
    assert {rows[("model-a", case)]["dcg"] for case in (first, second, third)} == {NOT_RUN}
    # model-b: DCG ran and failed every case (no record file, its paid replies kept): tagged, not "not run"
    for case in (first, second, third):
        row = rows[("model-b", case)]
        assert UNRESOLVED in row["tags"] and row["dcg"] == "–", case
        assert row["direct"] == row["gold"] == NOT_RUN
    assert (
        page.locator("#rows td.unrun").first.get_attribute("title") == "this stage was not run for this run"
    )
