"""The transcript viewer (show_results.py --html): a static site tested in a real browser (the distribution's
Chromium driven by Playwright); untrusted text stays text."""

import os
import shutil

import pytest

import show_results
from lexpilot.scripted.replies import ASK, PREDICT
from tests.conftest import Harness, sample_cases, write_dataset

HOSTILE = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2"></textarea><b>粗体</b>'
RLO = "\u202e反向"  # a right-to-left override never closed (issue 34 item 14)
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
    from lexpilot.scripted.provider import FakeProvider

    tmp = tmp_path_factory.mktemp("site")
    with FakeProvider(hostile) as provider, pytest.MonkeyPatch.context() as monkeypatch:
        h = Harness(tmp, provider, monkeypatch, write_dataset(tmp / "four.json", sample_cases()[:4]))
        for model in ("model-a", "model-b"):
            for stage in ("LexAwN", "DCG", "direct", "gold", "interaction"):
                assert h.run(stage, "--model", model) == 0
    assert show_results.main(["--output-root", str(h.root), "--html", str(tmp / "site")]) == 0
    return tmp / "site"


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


def test_the_site_in_a_real_browser(site, browser, tmp_path):
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
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
    from PIL import Image

    pixels = Image.open(shot).convert("L").getextrema()
    assert pixels[0] < 100 < pixels[1]  # not blank
    assert not errors


def test_every_message_is_its_own_bidi_isolate(site, browser):
    """Issue 34 item 14: "an unclosed right-to-left override in a reply reorders the rest of its block. Isolate each
    message". Each message's text is an isolate with its direction from its own text; the role label before it
    stays where it is, left of the text, in a message holding the override."""
    page = browser.new_page(viewport={"width": 1280, "height": 900})
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
    page.close()
