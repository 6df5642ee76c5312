"""The viewer's exact call says the model and tier that served it (docs/viewer.md): one model and tier said as
such; a record whose calls were served by more than one said call by call, in the order its `served_calls` lists
them (a record made before they were listed: each with its calls, as its usage counts them); a record that says
nothing shows nothing."""

import json
import re

import pytest

import show_results
from lexpilot.reporting.site.calls_view import served_line
from lexpilot.scripted.served import ServedAs, switching

JUDGE = "DeepSeek-R1"
NEXT = "deepseek-r2-0901"
SNAPSHOT = "eval-model-2026-07-01"


def calls_data(page) -> dict:
    """The exact calls' data a case page carries (call.js reads it)."""
    text = re.search(r'<script type="application/json" id="calls">(.*?)</script>', page, re.S).group(1)
    return json.loads(text)


def switched_site(harness, tmp_path):
    """One DCG case: the judge's first question judged as asked, its second as NEXT (accepted: the option is given),
    so the case's DCG record counts one call each; its forced questions' record, the evaluated model's two, both
    answered as its dated snapshot (an alias from the first call). The site written from it."""
    harness.provider.script = switching(harness.provider, [ServedAs(JUDGE, NEXT, 1)])
    harness.provider.served_as["eval-model"] = SNAPSHOT
    assert harness.run("DCG", "--limit", "1", "--concurrency", "1", "--allow-served-model-change") == 0
    site = tmp_path / "site"
    assert show_results.main(["--output-root", str(harness.root), "--html", str(site)]) == 0
    return site


@pytest.mark.slow  # a site written
def test_each_exact_call_says_what_served_its_records_calls(harness, tmp_path):
    page = (switched_site(harness, tmp_path) / "case" / "0.html").read_text(encoding="utf-8")
    usage = calls_data(page)["runs"][0]["usage"]
    assert usage["DCG"]["judge"][3] == f"served in order: call 1: {JUDGE}; call 2: {NEXT}"
    assert usage["force_ask"]["eval"][3] == f"served by {SNAPSHOT}"
    # the run's section is labelled as the report's tables label it
    assert f"eval-model (served: {SNAPSHOT}) · judge {JUDGE} (served: {JUDGE}, {NEXT})" in page


@pytest.mark.slow  # a browser
def test_the_exact_call_box_says_what_served_it_in_a_browser(harness, tmp_path, open_page):
    page = open_page()
    page.goto((switched_site(harness, tmp_path) / "case" / "0.html").as_uri())
    page.locator('button.call[data-r="judge"][data-k="DCG"]').first.click()
    said = page.locator(".callbox p").first.inner_text()
    assert "judge calls: 2 calls" in said and said.endswith("· time: not recorded")
    assert f", served in order: call 1: {JUDGE}; call 2: {NEXT} ·" in said


def test_a_records_tier_and_a_record_that_says_nothing():
    assert served_line({"calls": 3, "served:m": 3, "tier:flex": 3}) == "served by m, tier flex"
    assert served_line({"calls": 3, "served:m": 3, "tier:default": 1, "tier:flex": 2}) == (
        "served by m, tier default (1 call), flex (2 calls)"
    )
    assert served_line({"calls": 3, "prompt_tokens": 9}) == ""


def test_a_records_calls_said_in_order_where_they_were_served_apart():
    counts = {"calls": 4, "served:m": 3, "served:n": 1, "tier:flex": 2, "tier:default": 2}
    calls = [
        {"role": "judge", "served": "m", "tier": "flex"},
        {"role": "judge", "served": "m", "tier": "flex"},
        {"role": "judge", "served": "m", "tier": "default", "fallback": True},
        {"role": "judge", "served": ["m", "n"], "tier": "default"},  # an unusable reply asked again
    ]
    assert served_line(counts, calls) == (
        "served in order: calls 1-2: m, tier flex; call 3: m, tier default (fell back to the standard tier); "
        "call 4: m and n, tier default"
    )
    # every call of the role fell back alike: said once, with the fallback
    fell = {"role": "judge", "served": "m", "tier": "default", "fallback": True}
    assert served_line({"calls": 1, "served:m": 1, "tier:default": 1}, [fell]) == (
        "served by m, tier default (fell back to the standard tier)"
    )
    # calls served alike are said once, as the counts say them
    assert served_line({"calls": 2, "served:m": 2, "tier:flex": 2}, calls[:1] * 2) == "served by m, tier flex"
