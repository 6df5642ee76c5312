"""The viewer for every stage, in real Chromium: the later stages on the case page, every
overview table linked to its cases by identity, a task's link listing the cases it gets wrong first, every filter
written to the address, a case list usable at 800 px; hostile model output inert in each new view."""

import json
import re
from urllib.parse import parse_qs, urlparse

import pytest

import rejudge
import show_results
import user_probes
from categories import CAUSES, FOCAL_TYPES
from lexpilot.benchmark.dataset import load_dataset
from lexpilot.benchmark.prompts import render_claims
from lexpilot.protocols.catalog import GRID_STAGES, STAGE_SETS
from lexpilot.reporting.scoring.runs import USAGE_FIELDS
from lexpilot.reporting.tables.renderings import json_key
from lexpilot.scripted.kinds import between
from lexpilot.scripted.replies import default_reply
from tests.helpers.datasets import sample_cases, write_dataset
from tests.helpers.paths import ROOT, SAMPLE
from tests.helpers.stages import Harness

# kills, Ctrl-C, Redis, browsers or whole grids: left out of the quick loop (-m "not slow")
pytestmark = pytest.mark.slow

HOSTILE = '<img src=x onerror="window.__pwned = 3"><script>window.__pwned = 4</script>'


SEEN = set()
# each sample case's claims in its own order, as the extraction prompt lists them (one per line)
OWN_ORDER = {
    frozenset(text.split("\n")): text for text in (render_claims(case) for case in load_dataset(SAMPLE)[0])
}
SENT: set = set()
SENT_AS_MESSAGES: list = []  # the plain consultation's calls: a history sent as its own messages


def hostile(kind, prompt, body):
    if kind in ("plain", "targeted"):  # the plain answer and the Targeted questions carry markup
        return default_reply(kind, prompt) + HOSTILE
    if kind == "user":  # a carriage return, which an HTML parser would fold away: the exact call must keep it
        return default_reply(kind, prompt) + "\r\n另起一行"
    if kind == "dcg_judge":  # asked the same again (a re-judged run), the judge answers the other way
        first = default_reply(kind, prompt)
        again = prompt in SEEN
        SEEN.add(prompt)
        return {"是": "否", "否": "是"}[first] if again else first
    # the claims in another order than the case's own (the claim-order diagnostic): 驳回
    if kind == "ljp_judge":
        claims = between(prompt, "正式诉请")
        if OWN_ORDER.get(frozenset(claims.split("\n")), claims) != claims:
            return json.dumps({"results": ["驳回"] * len(claims.split("\n"))}, ensure_ascii=False)
    return None


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Two models, every stage run per model and run on four sample cases, model-a's run re-judged by the same
    judge; the site written with --complexity."""
    from lexpilot.scripted.provider import ScriptedProvider

    tmp = tmp_path_factory.mktemp("stages")
    SEEN.clear(), SENT.clear(), SENT_AS_MESSAGES.clear()  # the module may be built again in a worker
    with ScriptedProvider(hostile) as provider, pytest.MonkeyPatch.context() as monkeypatch:
        tenth = json.loads(json.dumps(sample_cases()[0]))  # a case numbered 10: sorted as a number, after 4
        tenth["case_number"] = "（2099）示例民初10号"
        tenth["underspecified_consultation"][0]["content"] += "（另一位）"
        h = Harness(
            tmp, provider, monkeypatch, write_dataset(tmp / "five.json", sample_cases()[:4] + [tenth])
        )
        for model in ("model-a", "model-b"):
            for name in STAGE_SETS["all"]:
                for stage in GRID_STAGES[name]:
                    assert h.run_stage(stage, "--model", model) == 0
        assert (
            h.run_stage(
                user_probes.STAGE,
                "--model",
                "model-a",
                "--probes",
                str(ROOT / "data" / "LexPilot_sample_probes.csv"),
            )
            == 0
        )
        assert (
            h.run_stage(rejudge.STAGE, "--model", "model-a", "--from-run", "r1", "--run-id", "r1-again") == 0
        )
        assert (
            h.run_stage(rejudge.STAGE, "--model", "model-b", "--from-run", "r1", "--run-id", "r1-again") == 0
        )
        SENT.update(provider.prompts())  # every prompt the scripted provider received, for the exact calls
        SENT_AS_MESSAGES.extend(r["messages"] for r in provider.requests if len(r["messages"]) > 1)
    complexity = tmp / "complexity.csv"
    complexity.write_text(
        "cause_of_action,complexity\n"
        + "".join(
            f"{cause},{i + 1}\n"
            for i, cause in enumerate(dict.fromkeys(c["cause_of_action"] for c in sample_cases()[:4]))
        ),
        encoding="utf-8",
    )
    assert (
        show_results.main(
            ["--output-root", str(h.root), "--html", str(tmp / "site"), "--complexity", str(complexity)]
        )
        == 0
    )
    return h.root, tmp / "site"


@pytest.fixture
def page(open_page):
    page = open_page(1280)
    yield page
    assert not page.errors
    assert page.evaluate("window.__pwned") is None  # no hostile markup ran anywhere


def test_a_case_page_shows_every_stage(built, page):
    root, site = built
    page.goto((site / "case" / "0.html").as_uri())
    body = page.inner_text("body")
    targeted = json.loads(
        next(root.glob("Behaviour_gen/r1/model-a-*/dialogues_targeted.jsonl"))
        .read_text(encoding="utf-8")
        .splitlines()[0]
    )
    question = targeted["attempts"][0]["dialogue"][0]["content"]
    assert question in body  # the Targeted dialogue's own text, shown as text (its markup included)
    for words in (
        "Targeted dialogue (Table 4)",
        "Off-target dialogue (Table 4)",
        "Validator",
        "attempt 1: accepted",
        "Plain consultation, underspecified history (response type:",
        "audit: clean",
        "Focal-point types (Figure 4)",
        "策略一 · answered",
    ):
        assert words in body, words
    # the probe study: each question, the User Model's reply and the DCG judge's label (as a word, not a record)
    probe = records(root, "eval_results", "probe_dcg.jsonl")[sample_cases()[0]["case_number"]]["labels"]["A"][
        "label"
    ]
    judged = page.locator("section#run0 .msg.judge", has_text="DCG judge on probe question A")
    assert "Probe study (Table 13)" in body and judged.locator(".text").inner_text() == probe
    assert "'label':" not in body and '"label":' not in body
    # the re-judged run, labelled by what differs, its labels beside the source's
    assert "original judge" in body and "model-a · re-judged by DeepSeek-R1" in body
    assert "window.__pwned = 3" in body
    # the focal points' types in the words Figure 4 and the case list use, the judge's label on hover
    shown = page.locator("h4:has-text('Focal-point types') + ul b").all()
    typed = records(root, "eval_results", "focal_types.jsonl")[sample_cases()[0]["case_number"]]["types"]
    assert [b.inner_text() for b in shown[: len(typed)]] == [FOCAL_TYPES[t["type"]] for t in typed]
    assert [b.get_attribute("title") for b in shown[: len(typed)]] == [t["type"] for t in typed]


def test_every_overview_table_links_its_cases_and_a_task_link_lists_its_failures_first(built, page):
    root, site = built
    page.goto((site / "index.html").as_uri())
    for title in (
        "Interaction behaviour and LJP (Table 4)",
        "Table 4 dialogues",
        "Figure 4 (c)",
        "Plain consultation (Table 6)",
        "Simulator audit",
        "Case complexity (Figure 3)",
        "Judge sensitivity",
    ):
        links = page.locator(f"h3:has-text('{title}') + table a")
        assert links.count() > 0, title
    # the LJP Direct QWK cell of model-a: the cases whose Direct verdicts are wrong come first, and only they
    wrong = set()
    for line in (
        next(root.glob("eval_results/r1/model-a-*/LJP_direct.jsonl")).read_text(encoding="utf-8").splitlines()
    ):
        record = json.loads(line)
        if record["gold"] != record["predicted"]:
            wrong.add(record["case_number"])
    page.locator("h3:has-text('Main results') + table tr:has(td:text-is('model-a')) a").nth(2).click()
    page.wait_for_url("**/cases.html#*")
    assert parse_qs(urlparse(page.url).fragment)["task"] == ["direct"]
    cases = page.locator("#rows tr td:first-child").all_inner_texts()
    failing = page.locator("#rows tr.failing td:first-child").all_inner_texts()
    assert set(failing) == wrong and cases[: len(failing)] == failing
    outcome = page.locator("#rows tr.failing td:nth-child(5) span.tag.bad").all_inner_texts()
    assert len(outcome) == len(failing) and all(
        "LJP Direct" in text.removeprefix("wrong: ").split(", ") for text in outcome
    )
    assert page.locator("#task").input_value() == "direct"  # the task is a filter like the others: it clears
    page.select_option("#task", "")
    assert "task" not in parse_qs(page.evaluate("location.hash").lstrip("#"))
    number = lambda case: int(case.split("初")[1].rstrip("号"))  # noqa: E731
    assert page.locator("#rows tr.failing").count() == 0 and listed(page) == sorted(listed(page), key=number)
    page.goto((site / "index.html").as_uri())  # a task with no wrong outcome sorts by its column instead
    plain = page.locator("h3:has-text('Plain consultation (Table 6)') + table a").first.get_attribute("href")
    assert parse_qs(urlparse(plain).fragment).get("sort") == ["plain"] and "task" not in plain


def test_every_filter_change_is_written_to_the_address(built, page):
    _, site = built
    page.goto((site / "cases.html").as_uri())
    page.select_option("#model", "model-b")
    page.select_option("#class", "Family")
    page.fill("#text", "示例")
    query = parse_qs(page.evaluate("location.hash").lstrip("#"))
    assert query == {"model": ["model-b"], "class": ["Family"], "text": ["示例"]}
    shown = page.inner_text("#count")
    page.goto((site / "index.html").as_uri())
    page.goto((site / "cases.html").as_uri() + "#" + page.evaluate("'model=model-b&class=Family&text=示例'"))
    assert page.inner_text("#count") == shown  # the address alone brings the view back
    page.goto((site / "cases.html").as_uri())
    page.fill("#text", "2090年结的婚")  # words of the first case's history, not of its number or cause
    first = sample_cases()[0]["case_number"]  # and the case numbered 10, a copy of it
    assert set(page.locator("#rows tr td:first-child").all_inner_texts()) == {first, "（2099）示例民初10号"}


def test_the_case_list_is_usable_at_800_pixels_and_labels_outcomes_in_words(built, open_page):
    _, site = built
    page = open_page(800)
    page.goto((site / "cases.html").as_uri())
    assert page.evaluate("document.documentElement.scrollWidth") <= 800  # the table scrolls, not the page
    outcome = page.locator("th[data-key='tags']").bounding_box()  # the outcome is seen without scrolling
    assert outcome["x"] + outcome["width"] <= 800
    tags = page.locator("#rows tr:first-child td").nth(4).locator("span.tag:not(.bad)").all_inner_texts()
    wrong = page.locator("#rows tr:first-child td").nth(4).locator("span.tag.bad").all_inner_texts()
    assert wrong == [] or wrong[0].startswith("wrong: ")  # the tasks it gets wrong, seen at 800 px
    from lexpilot.reporting.scoring.scoring import STOP_TAGS
    from lexpilot.reporting.tables.audit import AUDIT_TAGS
    from lexpilot.reporting.tables.claim_order import ORDER_TAGS
    from lexpilot.reporting.tables.formats import PLAIN_TYPE_NAMES, plain_tag

    plain = {plain_tag(h, n) for h in ("underspecified", "complete") for n in PLAIN_TYPE_NAMES.values()}
    assert tags and set(tags) <= {
        "over-asking",
        "DCG miss",
        "wrong verdict",
        "unresolved or failed",
        "claim order changed",
        *STOP_TAGS.values(),
        *ORDER_TAGS.values(),
        *plain,
        *AUDIT_TAGS.values(),
    }
    text = page.inner_text("#rows")
    assert ("success" in text or "miss" in text) and "true" not in text and "false" not in text
    assert "· answered" in text or "· asked" in text
    number = lambda n: int(n.split("初")[1].rstrip("号"))  # noqa: E731  （2099）示例民初12号 -> 12
    listed = [number(n) for n in page.locator("#rows tr td:first-child").all_inner_texts()]
    assert listed == sorted(listed)  # as numbers: 2 before 10
    page.click("th[data-key='case']")  # again: the other way
    listed = [number(n) for n in page.locator("#rows tr td:first-child").all_inner_texts()]
    assert listed == sorted(listed, reverse=True)


# per overview table cell: how many lines its text takes (a cell's text wrapped has rects at two heights)
CELL_LINES = """() => [...document.querySelectorAll('table td, table th')].map(c => {
  const r = document.createRange(); r.selectNodeContents(c);
  return [c.textContent, new Set([...r.getClientRects()].map(x => Math.round(x.top))).size];
})"""


def test_the_overview_reads_at_1400_pixels(built, open_page):
    """ "The overview's cells are all underlined links and wrap at 1,400 px". At 1,400 px every cell
    of every table (Figure 4 (a)'s eight columns the widest) is on one line, no table scrolls, and a link is its
    colour, not an underline; a cell that measured nothing (n/a) links nowhere. At 800 px a wide table scrolls in
    its own box, its cells still on one line, and the page does not."""
    _, site = built
    for width in (1400, 800):
        page = open_page(width)
        page.goto((site / "index.html").as_uri())
        cells = page.evaluate(CELL_LINES)
        assert len(cells) > 500 and [text for text, lines in cells if lines > 1] == [], width
        assert page.evaluate("document.documentElement.scrollWidth") <= width
        if width == 1400:
            wider = "[...document.querySelectorAll('table')].filter(t => t.scrollWidth > t.clientWidth)"
            assert page.evaluate(f"{wider}.length") == 0
            assert page.locator("h3:has-text('Figure 4 (a)') + table th").count() == 8
        decorations = page.locator("table a").evaluate_all(
            "links => [...new Set(links.map(a => getComputedStyle(a).textDecorationLine))]"
        )
        assert decorations == ["none"]
        unmeasured = page.locator("td").evaluate_all(
            "tds => tds.filter(td => td.textContent === 'n/a').map(td => td.querySelectorAll('a').length)"
        )
        assert unmeasured and set(unmeasured) == {0}


def records(root, top, name, run="r1", model="model-a") -> dict:
    path = next(root.glob(f"{top}/{run}/{model}-*/{name}"))
    return {r["case_number"]: r for r in map(json.loads, path.read_text(encoding="utf-8").splitlines())}


def listed(page) -> list[str]:
    return page.locator("#body tr td:first-child").all_inner_texts()


def test_comparisons_a_researcher_asks_for(built, page):
    """The comparison page: right under A and wrong under B; wrong in every run; the two judges disagree; a matrix of
    cases × models and runs, filterable to failures."""
    root, site = built
    right = {
        m: {
            n
            for n, r in records(root, "eval_results", "LJP_direct.jsonl", model=m).items()
            if r["gold"] == r["predicted"]
        }
        for m in ("model-a", "model-b")
    }
    cases = set(records(root, "eval_results", "LJP_direct.jsonl"))
    page.goto((site / "compare.html").as_uri() + "#mode=ab&task=direct&a=model-a · r1&b=model-b · r1")
    assert set(listed(page)) == right["model-a"] - right["model-b"]
    page.select_option("#mode", "never")
    page.select_option("#model", "model-b")
    assert set(listed(page)) == cases - right["model-b"]
    assert "mode=never" in page.evaluate("location.hash") and "model=model-b" in page.evaluate(
        "location.hash"
    )
    original = records(root, "eval_results", "DCG_results.jsonl")
    again = records(root, "eval_results", "DCG_results.jsonl", run="r1-again")
    page.select_option("#mode", "disagree")
    page.select_option("#judged", "DCG")
    labels = lambda record: [x["label"] for x in record["rounds"]]  # noqa: E731  judged again, label by label
    disagreeing = {n for n in original if labels(original[n]) != labels(again[n])}
    assert disagreeing and set(listed(page)) == disagreeing
    page.select_option("#judged", "LJP")  # the extraction judge decided as before on every case: none listed
    assert listed(page) == []
    page.select_option("#mode", "matrix")
    page.select_option("#task", "direct")
    assert (
        page.locator("#task option:checked").inner_text() == "LJP Direct"
    )  # named as the case list names it
    assert len(listed(page)) == len(cases)
    assert (
        page.locator("#body tr:first-child td").count() == 2 + 4
    )  # case, cause, and four runs (two re-judged)
    page.check("#failures")
    wrong_somewhere = cases - (right["model-a"] & right["model-b"])
    assert set(listed(page)) == wrong_somewhere


def test_each_reply_shows_the_exact_prompt_the_provider_received(built, page):
    """The prompt re-rendered from prompts/ and the case equals what the scripted provider received,
    for every call of a run: LexAwN, the LCA judge, DCG questions, replies and judge, the interaction's rounds and
    replies, the predictions and the extraction judge; the plain consultation (its history as messages) and its
    response-type judge; Table 4's questions, replies, validator, prediction and extraction; the simulator audit of
    each User Model reply; the probe study's replies and DCG judge; the claim-order diagnostic's judge. With the
    role's model and settings, and its tokens."""
    root, site = built
    case = sample_cases()[0]["case_number"]
    page.goto((site / "case" / "0.html").as_uri())
    assert page.locator("h1").inner_text() == case
    shown, kinds, reordered = open_every_call(page)
    assert kinds >= {
        "lexawn",
        "judge_lca",
        "force_ask",
        "user_standard",
        "judge_dcg",
        "force_judge",
        "judge_ljp",
        "(messages)",
        "judge_response_type",
        "behaviour_targeted",
        "behaviour_off_target",
        "behaviour_validation",
        "judge_simulator_audit",
        "judge_ljp (claims reordered)",
    }, kinds
    missing = [str(p)[:80] for p in shown if p not in (SENT_AS_MESSAGES if isinstance(p, list) else SENT)]
    assert not missing, missing
    assert "differs from the file this run recorded" not in page.inner_text("body")
    # every call of the case in this run has its button: the calls its records report, less the probe study's D
    # reply (its key details are the probe file's, not on the page)
    label = page.locator("section#run0").get_attribute("data-label")
    run_id, model = label.split(" · ")[-1], label.split(" · ")[0]
    calls = [
        (path.name, u.get("calls", 0))
        for path in sorted(root.glob(f"*/{run_id}/{model}-*/*.jsonl"))
        for line in path.read_text(encoding="utf-8").splitlines()
        if json.loads(line)["case_number"] == case
        for u in json.loads(line).get("usage", {}).values()
    ]
    d_replies = sum(
        "D" in json.loads(line)["replies"]
        for path in root.glob(f"*/{run_id}/{model}-*/probe_replies.jsonl")
        for line in path.read_text(encoding="utf-8").splitlines()
        if json.loads(line)["case_number"] == case
    )
    check_the_reordered_claims_are_shown_as_the_judge_saw_them(reordered, root, run_id, model, case)
    reused = 1  # the interaction's round 1 is LexAwN's reply to the underspecified history, shown again with its call
    assert d_replies == 1 and len(shown) == sum(n for _, n in calls) - d_replies + reused, calls


def open_every_call(page) -> tuple[list, set, list]:
    """Each call button of the first run opened: the prompts shown, the prompt kinds, and the (record kind, prompt)
    of every call whose claims the diagnostic reordered; each call's head names its settings and tokens."""
    buttons = page.locator("section#run0 button.call")
    shown, kinds, reordered = [], set(), []
    for i in range(buttons.count()):
        button = buttons.nth(i)
        button.click()
        template, spec = button.get_attribute("data-t"), button.get_attribute("data-s")
        kinds.add(template + (" (claims reordered)" if "claims=co:" in spec else ""))
        box = page.locator("section#run0 div.callbox").nth(i)
        text = box.locator("pre.prompt").inner_text()
        shown.append(json.loads(text) if template == "(messages)" else text)
        if "claims=co:" in spec:  # the claims in the order the diagnostic showed them, not the case's own
            reordered.append((button.get_attribute("data-k"), text))
        head = box.locator("p").first.inner_text()
        assert "temperature" in head and "max_tokens" in head and "calls," in head
    return shown, kinds, reordered


def check_the_reordered_claims_are_shown_as_the_judge_saw_them(reordered, root, run_id, model, case) -> None:
    """Per setup, the claims reordered and the same-order control, each as the judge saw them."""
    assert len(reordered) == 6
    for kind in {k for k, _ in reordered}:
        record = records(root, "eval_results", f"{kind}.jsonl", run_id, model)[case]
        assert record["order"] != sorted(record["order"])
        shown_orders = []
        for text in (t for k, t in reordered if k == kind):
            positions = [text.index(c) for c in record["claims"]]
            shown_orders.append(sorted(range(len(positions)), key=positions.__getitem__))
        assert sorted(shown_orders) == sorted([record["order"], sorted(record["order"])])


def test_the_site_written_by_two_processes_is_the_site_written_by_one(built, tmp_path):
    """The case pages are written on every core (bench/viewer.py): byte for byte the pages of one process."""
    from lexpilot.reporting.scoring.groups import group_runs
    from lexpilot.reporting.scoring.results import load_runs, score_runs
    from lexpilot.reporting.site.viewer import case_renderer, site_cases, write_site

    root, _ = built
    sites = {n: tmp_path / f"site{n}" for n in (1, 2)}
    for n, folder in sites.items():  # the runs scored and rendered, and the pages written, by n processes
        runs = load_runs(root, None, None, score=False)
        cases = site_cases(runs, None)
        runs = score_runs(runs, root, render=case_renderer(cases), processes=n)
        assert write_site(folder, group_runs([r for r in runs if r.tasks]), [], cases, processes=n) == 5
    files = {
        n: {p.relative_to(f): p.read_bytes() for p in sorted(f.rglob("*.html"))} for n, f in sites.items()
    }
    assert len(files[1]) == 8 and files[1] == files[2]


def test_a_prompt_file_changed_since_the_run_is_said(built):
    """The exact call says when prompts/ differs from the file the run recorded (the text is then today's file)."""
    from lexpilot.reporting.site.calls_view import run_settings
    from lexpilot.storage.manifest import Manifest

    root, _ = built
    manifest = json.loads(next(root.glob("runs/r1/model-a-*/manifest.json")).read_text(encoding="utf-8"))
    assert run_settings(Manifest.of(manifest))["changed"] == []
    manifest["prompt_files"]["lexawn.txt"] = "0" * 16
    info = run_settings(Manifest.of(manifest))
    assert info["changed"] == ["lexawn"]
    assert (
        info["roles"]["judge"]["model"] == "DeepSeek-R1"
        and "temperature 0.1" in info["roles"]["judge"]["settings"]
    )


def test_a_rejudged_copy_is_no_further_model_and_the_judges_columns_say_which_is_which(built, capsys):
    root, _ = built
    capsys.readouterr()
    assert (
        show_results.main(
            [
                "--output-root",
                str(root),
                "--format",
                "csv",
                "--table",
                "interaction_gain",
                "judge_sensitivity",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "Average over 2 models" in out  # model-a and model-b; model-a's re-judged copy is not a third
    import csv
    import io

    header = next(
        r
        for r in csv.reader(io.StringIO(out))
        if r and r[0].startswith("model-a · re-judged by DeepSeek-R1: every metric") and r[1] == "header"
    )
    assert "original (DeepSeek-R1) mean" in header and "re-judged (DeepSeek-R1) mean" in header


def test_an_unknown_filter_value_filters_to_nothing_and_the_sort_is_in_the_address(built, page):
    _, site = built
    page.goto((site / "cases.html").as_uri() + "#run=smoke")  # a run this site does not hold
    assert page.inner_text("#count").startswith("0 of")  # not silently every run
    page.goto((site / "cases.html").as_uri())
    page.click("th[data-key='cause']")
    page.click("th[data-key='cause']")
    assert parse_qs(page.evaluate("location.hash").lstrip("#")) == {"sort": ["cause"], "dir": ["-1"]}
    first = page.locator("#rows tr td:first-child").all_inner_texts()
    page.goto((site / "index.html").as_uri())
    page.goto((site / "cases.html").as_uri() + "#sort=cause&dir=-1")
    assert page.locator("#rows tr td:first-child").all_inner_texts() == first


def test_a_case_list_row_opens_its_run_and_a_case_page_shows_one_task_at_a_time(built, page):
    """At many runs a case page stays navigable. A row of the case list opens the case page at its
    own run's transcript, unfolded; "Show" keeps one task of every run in view."""
    _, site = built
    page.goto((site / "cases.html").as_uri() + "#group=model-b")
    page.locator("#rows a").first.click()
    page.wait_for_url("**/case/*.html#run=*")
    section = page.locator('section.run[data-label="model-b · r1"]')
    assert section.locator("details").first.evaluate("d => d.open")
    top = section.evaluate("s => s.getBoundingClientRect().top")
    assert -1 <= top < 900  # brought into view (to within a pixel's rounding)
    page.select_option("#part", "ljp")
    shown = {p.get_attribute("data-part") for p in page.locator("div.part:visible").all()}
    assert shown == {"ljp"} and page.locator("div.part[data-part='dcg']").count() > 0
    runs = page.locator("section.run").count()
    # every run's, unfolded
    assert runs >= 3 and page.locator("div.part[data-part='ljp']:visible").count() == runs
    audit = page.locator("button.call", has_text="the audit's exact call")
    assert audit.count() > 0 and page.locator("button.call", has_text="exact call").count() > audit.count()


def test_links_of_figure_3_figure_4_the_judges_and_the_claim_order_select_what_they_say(built, page):
    """Links no broader than their cells: Figure 4's focal-type cells select the cases with a
    focal point of that type; Figure 3's rows their group's cases; the judges' label table the cases they
    disagree on (compare.html); the claim-order rows the cases whose verdicts changed with the claims shuffled."""
    root, site = built
    page.goto((site / "index.html").as_uri())
    href = lambda title, n=0: page.locator(f"h3:has-text('{title}') + table a").nth(n).get_attribute("href")  # noqa: E731
    typed = records(root, "eval_results", "focal_types.jsonl")
    link = href("Figure 4 (a)")
    query = parse_qs(urlparse(link).fragment)
    wanted = {
        n
        for n, r in typed.items()
        if any(FOCAL_TYPES.get(t["type"], t["type"]) == query["focal"][0] for t in r["types"])
    }
    page.goto(
        (site / link).as_uri()
        if "#" not in link
        else (site / "cases.html").as_uri() + "#" + urlparse(link).fragment
    )
    assert (
        query["task"] == ["DCG"]
        and wanted
        and set(page.locator("#rows tr td:first-child").all_inner_texts()) == wanted
    )
    page.goto((site / "index.html").as_uri())
    assert "group" in parse_qs(urlparse(href("Case complexity (Figure 3)")).fragment)
    judges = parse_qs(urlparse(href("Judge sensitivity: the two judges")).fragment)
    assert judges["mode"] == ["disagree"] and judges["judged"][0] in (
        "LCA",
        "DCG",
        "LJP",
        "interaction rounds",
    )
    order = parse_qs(urlparse(href("Diagnostic, outside the paper")).fragment)
    assert order["tag"][0].startswith("claim order changed: ")  # in the row's own setup
    changed = {
        n
        for kind in ("direct", "interaction", "gold")
        for n, r in records(root, "eval_results", f"LJP_order_{kind}.jsonl").items()
        if r["predicted"] != r["original"]
    }
    page.goto((site / "cases.html").as_uri() + "#group=model-a&run=r1&tag=claim%20order%20changed")
    assert changed and set(page.locator("#rows tr td:first-child").all_inner_texts()) == changed


def test_compare_draws_the_first_200_cases_then_more_on_request(tmp_path, page):
    """The comparisons' first screen stays quick at 432 cases × 50 runs (bench/viewer.py): 200 cases drawn, the rest
    on "Show more", the count saying so."""
    from bench.viewer import write_grid

    dataset = write_grid(tmp_path, 1, 1, 250, later=0)
    assert (
        show_results.main(
            [
                "--output-root",
                str(tmp_path / "out"),
                "--html",
                str(tmp_path / "site"),
                "--dataset",
                str(dataset),
            ]
        )
        == 0
    )
    page.goto((tmp_path / "site" / "compare.html").as_uri())
    assert page.inner_text("#count") == "250 cases, the first 200 shown" and len(listed(page)) == 200
    page.click("#more")
    assert page.inner_text("#count") == "250 cases" and len(listed(page)) == 250


def test_the_case_list_leaves_out_an_older_records_injected_disruption_as_the_metrics_do():
    """An audit record saved before replies were labelled `injected` names the disruption by its prompt; the case
    list, like the audit's metrics (metrics.injected), does not count it as the simulator's fault."""
    import types

    from lexpilot.benchmark.records import AUDIT
    from lexpilot.reporting.site.case_list import outcomes
    from lexpilot.reporting.site.transcripts import RunRecords

    disruption = {
        "source": "interaction round 2 (user_delayed)",
        "over_disclosed": ["x"],
        "error": True,
        "answered": True,
    }
    records = {k: {} for k in ("LCA", "DCG", "interaction", "LJP_direct", "LJP_gold", "LJP_interaction")}
    records[AUDIT["interaction"].name] = {"1": {"replies": [disruption]}}
    run = types.SimpleNamespace(model="m", run_id="r1", condition="delayed", ran=set(records))
    assert "audit" not in outcomes(RunRecords(run, "m · r1", records, "m"), "1")
    records[AUDIT["interaction"].name]["1"]["replies"].append({**disruption, "source": "interaction round 3"})
    # per source
    assert outcomes(RunRecords(run, "m · r1", records, "m"), "1")["audit"] == "interaction 1 flagged"


@pytest.mark.parametrize(
    "title,column,stopped",
    [
        (
            "Interaction behaviour: mean questions",
            "Judged in round 1 (premature)",
            lambda r: r["stop_reason"] == "judged" and len(r["rounds"]) == 1,
        ),
        (
            "Interaction behaviour: mean questions",
            "Round 3",
            lambda r: r["stop_reason"] == "judged" and len(r["rounds"]) == 3,
        ),
        ("Interaction behaviour: mean questions", "Budget (forced)", lambda r: r["stop_reason"] == "budget"),
        ("Interaction-Based QWK by stop reason", "Budget (forced)", lambda r: r["stop_reason"] == "budget"),
        (
            "Premature predictions (judged in round 1) by class",
            "Overall",
            lambda r: r["stop_reason"] == "judged" and len(r["rounds"]) == 1,
        ),
    ],
)
def test_a_stop_reason_cell_opens_the_cases_that_stopped_so(built, page, title, column, stopped):
    """ "The behaviour cells ("Judged in round 1 (premature)", rounds 2-3, budget) open the
    premature, round and budget tags, not the wrong-verdict list". In Chromium, against the interaction records."""
    root, site = built
    page.goto((site / "index.html").as_uri())
    table = page.locator(f"h3:has-text('{title}') + table")
    headers = table.locator("tr").first.locator("th").all_inner_texts()
    row = table.locator("tr", has=page.locator("td:first-child", has_text="model-a")).first
    link = row.locator("td").nth(headers.index(column)).locator("a").get_attribute("href")
    query = parse_qs(urlparse(link).fragment)
    page.goto((site / "cases.html").as_uri() + "#" + urlparse(link).fragment)
    assert query["group"] == ["model-a"]  # model-a's run r1, not its re-judged copy
    wanted = {n for n, r in records(root, "AwN_gen", "interaction.jsonl").items() if stopped(r)}
    listed = page.locator("#rows tr td:first-child").all_inner_texts()
    assert wanted and len(listed) == len(set(listed)) and set(listed) == wanted


def test_a_judge_sensitivity_row_selects_its_re_judged_run(built, page):
    """ "The judge-sensitivity rows select their re-judged run": model-a's and model-b's runs are
    both re-judged; each row's link lists only the cases where its own run's two judges disagree."""
    root, site = built
    page.goto((site / "index.html").as_uri())
    table = page.locator("h3:has-text('Judge sensitivity: the two judges') + table")
    seen = set()
    for row in table.locator("tr").all()[1:]:
        cells = row.locator("td").all_inner_texts()
        href = row.locator("td a").first.get_attribute("href")
        query = parse_qs(urlparse(href).fragment)
        assert query["rejudged"][0].startswith(cells[0]) and query["rejudged"][0].endswith("· r1-again")
        page.goto((site / "compare.html").as_uri() + "#" + urlparse(href).fragment)
        shown = {tuple(r.locator("td").all_inner_texts()[2:3]) for r in page.locator("#body tr").all()}
        assert shown <= {(query["rejudged"][0],)}  # only its own re-judged run
        seen.add(query["rejudged"][0])
        page.goto((site / "index.html").as_uri())
    assert len(seen) == 2


def test_a_claim_order_row_selects_its_run_and_setup(built, page):
    """ "The claim-order rows select their run and setup": each row lists the cases of its run whose
    verdicts changed with the claims shuffled in its own setup."""
    root, site = built
    names = {"Direct": "direct", "Interaction-Based": "interaction", "Gold-Standard": "gold"}
    page.goto((site / "index.html").as_uri())
    rows = page.locator("h3:has-text('Diagnostic, outside the paper') + table tr").all()[1:]
    links = [(r.locator("td").all_inner_texts(), r.locator("td a").first.get_attribute("href")) for r in rows]
    assert len(links) >= 3
    for cells, href in links:
        model, run, setup = cells[0], cells[1], names[cells[2]]
        query = parse_qs(urlparse(href).fragment)
        assert query["group"] == [model] and query["run"] == [run]
        changed = {
            n
            for n, r in records(
                root, "eval_results", f"LJP_order_{setup}.jsonl", run=run, model=model
            ).items()
            if r["predicted"] != r["original"]
        }
        page.goto((site / "cases.html").as_uri() + "#" + urlparse(href).fragment)
        assert set(page.locator("#rows tr td:first-child").all_inner_texts()) == changed


@pytest.mark.parametrize(
    "title", ["Plain consultation (Table 6)", "Plain response type against the LexAwN label"]
)
def test_a_table_6_cell_opens_the_cases_answered_with_its_type(built, page, title):
    """ "Table 6 cells filter by their type; today they sort alphabetically" (and the table
    crossing them with LexAwN's labels, whose shares are over the cases of each type)."""
    from lexpilot.reporting.tables.formats import PLAIN_TYPE_NAMES

    root, site = built
    typed = records(root, "eval_results", "plain_types_underspecified.jsonl")
    page.goto((site / "index.html").as_uri())
    table = page.locator(f"h3:has-text('{title}') + table")
    headers = table.locator("tr").first.locator("th").all_inner_texts()
    row = table.locator("tr", has=page.locator("td:first-child", has_text="model-a")).first
    opened = 0
    for key, name in PLAIN_TYPE_NAMES.items():
        href = row.locator("td").nth(headers.index(name)).locator("a").get_attribute("href")
        page.goto((site / "cases.html").as_uri() + "#" + urlparse(href).fragment)
        wanted = {n for n, r in typed.items() if r["type"] == key}
        assert set(page.locator("#rows tr td:first-child").all_inner_texts()) == wanted
        opened += bool(wanted)
        page.goto((site / "index.html").as_uri())
    assert opened  # some type has cases


def test_an_audit_row_lists_the_cases_whose_replies_it_audited(built, page):
    """ "The audit's "interaction" row lists only the cases with audited replies"."""
    from lexpilot.reporting.scoring.metrics import protocol_turn

    root, site = built
    page.goto((site / "index.html").as_uri())
    rows = page.locator("h3:has-text('Simulator audit: User Model replies') + table tr").all()[1:]
    links = [(r.locator("td").all_inner_texts(), r.locator("td a").first.get_attribute("href")) for r in rows]
    checked = 0
    for cells, href in links:
        if cells[0] != "model-a":
            continue
        source = {"DCG": "dcg", "interaction": "interaction"}[cells[1]]
        audit = records(root, "eval_results", f"simulator_audit_{source}.jsonl")
        wanted = {n for n, r in audit.items() if any(not protocol_turn(x) for x in r.get("replies", []))}
        page.goto((site / "cases.html").as_uri() + "#" + urlparse(href).fragment)
        assert wanted and set(page.locator("#rows tr td:first-child").all_inner_texts()) == wanted
        checked += 1
        # a rate's cell: the cases with a reply of this source flagged so (not every audited case)
        flags = {
            "Over-disclosure": lambda x: bool(x["over_disclosed"]),
            "Error": lambda x: bool(x["error"]),
            "Non-answer": lambda x: not x["answered"],
        }
        for at, (name, flagged) in enumerate(flags.items(), 3):
            page.goto((site / "index.html").as_uri())
            row = next(
                r
                for r in page.locator("h3:has-text('Simulator audit: User Model replies') + table tr").all()[
                    1:
                ]
                if r.locator("td").all_inner_texts()[:2] == cells[:2]
            )
            link = row.locator("td").nth(at).locator("a").get_attribute("href")
            page.goto((site / "cases.html").as_uri() + "#" + urlparse(link).fragment)
            expected = {
                n
                for n, r in audit.items()
                if any(flagged(x) for x in r.get("replies", []) if not protocol_turn(x))
            }
            assert set(page.locator("#rows tr td:first-child").all_inner_texts()) == expected, (source, name)
        page.goto((site / "index.html").as_uri())
    assert checked == 2


def test_a_case_is_wrong_on_the_audit_only_when_a_reply_of_it_was_flagged(built):
    """ "DCG clean; interaction clean" is a clean audit, not "wrong: audit flagged"; a case is
    wrong on the audit when one of its audited replies (either source, the protocol's own turns left out) was
    flagged for over-disclosure, an error or a non-answer."""
    from lexpilot.reporting.scoring.metrics import protocol_turn

    root, site = built
    html = (site / "cases.html").read_text(encoding="utf-8")
    rows = json.loads(html.split('<script type="application/json" id="data">')[1].split("</script>")[0])
    audits = {s: records(root, "eval_results", f"simulator_audit_{s}.jsonl") for s in ("dcg", "interaction")}
    flagged = {
        n
        for audit in audits.values()
        for n, r in audit.items()
        for x in r.get("replies", [])
        if not protocol_turn(x) and (x["over_disclosed"] or x["error"] or not x["answered"])
    }
    mine = [r for r in rows if r["model"] == "model-a" and r["run"] == "r1" and "audit" in r]
    assert mine and {r["case"] for r in mine if "audit" in r["fails"]} == flagged
    # a clean one is among them
    assert any("clean" in r["audit"] and "flagged" not in r["audit"] for r in mine)


def test_the_case_list_at_1400_pixels_shows_rows_and_every_column(built, open_page):
    """ "The case list at 1,400 px shows more than 3.5 rows: Outcome tags wrap less, and Plain type
    and Audit are in view"."""
    _, site = built
    page = open_page(1400)
    page.goto((site / "cases.html").as_uri())
    rows = page.locator("#rows tr").all()
    bottoms = [r.bounding_box()["y"] + r.bounding_box()["height"] for r in rows[:10]]
    assert sum(b <= 900 for b in bottoms) >= 4  # four rows whole on the first screen, at least
    for header in ("Plain type", "Audit"):
        box = page.locator("#cases th", has_text=header).bounding_box()
        assert box["x"] + box["width"] <= 1400, header  # in view without scrolling
    tags = page.locator("#rows tr:first-child span.tag:not(.bad)").all()
    assert all(t.bounding_box()["height"] < 24 for t in tags)  # each outcome on one line


def test_figure_4_b_average_row_opens_the_runs_it_averages(built, page):
    """Figure 4 (b)'s average row opened every run (re-judged copies included); it opens
    the cases, of its class, of the runs with focal-point types that the average is over."""
    from categories import cause_class

    root, site = built
    page.goto((site / "index.html").as_uri())
    table = page.locator("h3:has-text('Figure 4 (b)') + table")
    headers = table.locator("tr").first.locator("th").all_inner_texts()
    average = table.locator("tr", has=page.locator("td:first-child", has_text="Average over")).first
    cls = headers[1]
    href = average.locator("td").nth(1).locator("a").get_attribute("href")
    page.goto((site / "cases.html").as_uri() + "#" + urlparse(href).fragment)
    listed = set(
        zip(
            page.locator("#rows tr td:first-child").all_inner_texts(),
            page.locator("#rows tr td:nth-child(4)").all_inner_texts(),
        )
    )
    causes = {
        c["case_number"]: c["cause_of_action"]
        for c in json.loads((root.parent / "five.json").read_text(encoding="utf-8"))  # the built dataset
    }
    wanted = {
        (n, f"{model} · r1")
        for model in ("model-a", "model-b")
        for n in records(root, "eval_results", "focal_types.jsonl", model=model)
        if cause_class(causes[n]) == cls
    }
    assert wanted and listed == wanted


SNAKE_CASE = r"[a-z0-9]+(_[a-z0-9]+)*"


def test_the_json_names_every_metric_and_number_in_one_style(built, capsys):
    """ "Give every number its own column or field, and use one style for JSON metric keys." On
    every stage's runs, with every table of the report riding along: each key that names what was measured or over
    which cases is snake_case (a cause of action keeps its Chinese name), and the numbers under them are the
    records' own, counted here by hand."""
    root, _ = built
    assert show_results.main(["--output-root", str(root), "--usage", "--table", "nosuch"]) == 2
    # as a user lists them
    every_table = capsys.readouterr().err.split("tables: ")[1].rstrip(")\n").split(", ")
    assert (
        show_results.main(
            [
                "--output-root",
                str(root),
                "--format",
                "json",
                "--usage",
                "--ci",
                "--resamples",
                "50",
                "--table",
                *every_table,
            ]
        )
        == 0
    )
    report = json.loads(capsys.readouterr().out)

    def one_style(key: str) -> bool:
        return bool(re.fullmatch(SNAKE_CASE, key)) or not re.search("[A-Za-z]", key)  # or a name in Chinese

    names = [
        (t, m, c)
        for g in report["groups"]
        for t, ms in g["metrics"].items()
        for m, cs in ms.items()
        for c in cs
    ]
    numbers = {k for t in report["tables"] for r in t["rows"] for c in r if isinstance(c, dict) for k in c}
    assert len(names) > 300 and {"sd", "mean", "low", "high", "n", "prompt_tokens"} <= numbers
    assert [n for n in names if not all(map(one_style, n))] == [] and sorted(
        k for k in numbers if not one_style(k)
    ) == []
    # the causes of action are there, in Chinese
    assert any(not re.search("[A-Za-z]", c) for _, _, c in names)
    assert [c for c in CAUSES if json_key(c) != c] == [] and len(CAUSES) == 36  # each keeps its name
    check_the_numbers_are_the_records_own(report, root)
    check_the_docs_table_of_names_is_the_rules()
    assert report["json_format"] == 2
    check_a_usage_cell_sums_the_records_usage(report)


def test_every_metric_of_a_scored_run_is_named_by_its_family_name_and_part(built):
    """ "Metric keys become a small named type, with one family per kind of number." On every
    stage's runs: each key of every run's metrics is a MetricKey, and its parts mean the same in every family (a
    part is OVERALL, a class, a cause of action or a stop reason; a name never carries a class)."""
    from lexpilot.benchmark.categories import CLASS_LABELS
    from lexpilot.reporting.scoring.results import load_runs
    from lexpilot.reporting.scoring.runs import OVERALL, MetricKey
    from lexpilot.reporting.scoring.scoring import STOP_CATEGORIES

    root, _ = built
    keys = {k for run in load_runs(root, None, None) for k in run.metrics}
    assert len(keys) > 100 and {type(k) for k in keys} == {MetricKey}
    parts = {OVERALL, *CLASS_LABELS, *CAUSES, *STOP_CATEGORIES}
    assert {k.part for k in keys} <= parts and not {k.name for k in keys} & {*CLASS_LABELS, *CAUSES}
    assert {k.family for k in keys} >= {"LCA", "DCG", "by cause", "T4 attempts", "behaviour", "focal points"}


def check_the_numbers_are_the_records_own(report: dict, root) -> None:
    """Model A's DCG accuracy, Table 4's case count and the share judged in round 1, counted from its records."""
    model_a = next(g for g in report["groups"] if g["model"] == "model-a" and g["run_ids"] == ["r1"])[
        "metrics"
    ]
    dcg = records(root, "eval_results", "DCG_results.jsonl")
    assert (
        model_a["dcg"]["accuracy"]["overall"]["mean"] == sum(r["success"] for r in dcg.values()) / len(dcg)
        and len(dcg) == 5
    )
    assert model_a["table_4_cases"]["all"]["overall"]["mean"] == 5
    judged_first = [
        r["stop_reason"] == "judged" and len(r["rounds"]) == 1
        for r in records(root, "AwN_gen", "interaction.jsonl").values()  # a judgment in round 1
    ]
    assert model_a["behaviour"]["round_1"]["overall"]["mean"] == sum(judged_first) / len(judged_first)


def check_the_docs_table_of_names_is_the_rules() -> None:
    """The docs' table of names is the rule's: each name the tables print, then its JSON key."""
    docs = (
        (ROOT / "docs" / "results.md").read_text(encoding="utf-8").split("The JSON's keys have one style")[1]
    )
    rows = [line.split("|")[1:3] for line in docs.split("\n## ")[0].splitlines() if line.startswith("| `")]
    pairs = [
        (a, b)
        for names, keys in rows
        for a, b in zip(re.findall("`([^`]+)`", names), re.findall("`([^`]+)`", keys))
    ]
    assert len(pairs) >= 15 and [(a, b) for a, b in pairs if json_key(a) != b] == []


def check_a_usage_cell_sums_the_records_usage(report: dict) -> None:
    """One key per quantity: a usage cell's numbers are the records' usage fields the group gives, summed by hand."""
    group = next(g for g in report["groups"] if g["model"] == "model-a" and g["run_ids"] == ["r1"])
    usage = next(t for t in report["tables"] if t["id"] == "usage_per_run")
    row = next(r for r in usage["rows"] if r[0] == "model-a" and r[1] == "r1")
    judge = dict(row[usage["headers"].index("Judge")])
    by_hand = {}
    for roles in group["usage"]["r1"].values():
        for field, n in roles.get("judge", {}).items():
            by_hand[field] = by_hand.get(field, 0) + n
    assert judge.pop("text").startswith(f"{by_hand['calls']} / ") and by_hand["calls"] > 50
    assert judge.pop("unanswered_calls") == group["unanswered_calls"]["r1"].get("judge", 0) == 0
    # the usage also counts what served the calls and their price classes ("served:ID", "flex:calls"): a cell's
    # columns are the token counts
    assert {k: v for k, v in judge.items() if v} == {k: v for k, v in by_hand.items() if v and ":" not in k}
    assert by_hand["served:DeepSeek-R1"] == by_hand["calls"]
    assert set(judge) <= set(USAGE_FIELDS)  # named as the records name them, a zero count too
