"""An exported Inspect log opened in Inspect's own viewer: `inspect view` serves the export on 127.0.0.1, and Chromium
(driven by Playwright) lists the run's logs, opens one and renders a sample's messages, the User Model's turns
among them."""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

import export_results
from tests.helpers.optional import INSPECT, needs

pytestmark = [pytest.mark.slow, needs("inspect_ai", INSPECT)]

SCREENSHOT = Path(__file__).resolve().parents[3] / "docs" / "inspect-view.png"
# docs/'s picture is made again on purpose only; read before the tests' clean environment drops LEXPILOT_*
UPDATE_SCREENSHOT = bool(os.environ.get("LEXPILOT_UPDATE_SCREENSHOTS"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def viewer(tmp_path):
    """`inspect view` on a folder of its own, on a free loopback port: its address, once it answers."""
    logs = tmp_path / "logs"
    logs.mkdir()
    port = free_port()
    command = [sys.executable, "-m", "inspect_ai", "view", "--log-dir", str(logs)]
    server = subprocess.Popen(
        [*command, "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,  # its own group: stopped whole, whatever it started
        env={**os.environ, "INSPECT_VIEW_NO_BROWSER": "1"},
    )
    base = f"http://127.0.0.1:{port}"
    direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never through a proxy
    deadline = time.monotonic() + 60
    while True:
        try:
            with direct.open(f"{base}/api/logs", timeout=2) as answer:
                if answer.status == 200:
                    break
        except OSError:
            pass
        if server.poll() is not None or time.monotonic() > deadline:
            server.kill()
            pytest.fail(f"inspect view did not start: {server.communicate()[1].decode()[-500:]}")
        time.sleep(0.2)
    yield base, logs
    os.killpg(server.pid, signal.SIGTERM)
    try:
        server.wait(15)
    except subprocess.TimeoutExpired:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()
    server.stderr.close()


def test_inspect_view_renders_an_exported_sample(grid, viewer, open_page, tmp_path):
    """The viewer lists the five logs of one model and run, opens the Interaction-Based one, and shows a case's
    consultation: its first dataset turn and the User Model's reply, as the harness's records hold them; its
    Transcript tab shows the judge's score."""
    base, logs = viewer
    out = tmp_path / "export"
    argv = ["--output-root", str(grid), "--format", "inspect", "--output", str(out)]
    assert export_results.main([*argv, "--model", "model-a", "--run-id", "r1"]) == 0
    shutil.copytree(out / "inspect", logs, dirs_exist_ok=True)
    (path,) = grid.glob("AwN_gen/r1/model-a-*/interaction.jsonl")
    # a case whose consultation went on with the User Model's turns
    first, user_model_turn = next(
        (record, turns[0])
        for record in map(json.loads, path.read_text(encoding="utf-8").splitlines())
        if (
            turns := [
                m["content"]
                for m in record["continued_history"][len(record["input_history"]) :]
                if m["role"] == "user"
            ]
        )
    )
    history = first["continued_history"]

    page = open_page(1280)
    page.goto(base)
    for stage in ("LCA", "DCG", "LJP_direct", "LJP_gold", "LJP_interaction"):
        page.get_by_text(f"lexpilot/{stage}", exact=True).first.wait_for(timeout=30_000)
    page.get_by_text("lexpilot/LJP_interaction", exact=True).first.click()
    page.get_by_text(first["case_number"]).first.click()
    page.get_by_text("Messages", exact=True).first.click()  # a sample with events opens on its Transcript
    for text in (history[0]["content"], user_model_turn):
        page.get_by_text(text[:40]).first.wait_for(timeout=30_000)  # a message shown whole, as text
    page.screenshot(path=str(tmp_path / "inspect-view.png"))
    if UPDATE_SCREENSHOT:
        shutil.copyfile(tmp_path / "inspect-view.png", SCREENSHOT)
    assert (tmp_path / "inspect-view.png").stat().st_size > 10_000
    # the Transcript tab shows the sample's event (with none it says they were removed for the browser's size limit)
    page.get_by_text("Transcript", exact=True).first.click()
    page.get_by_text("scoring", exact=True).first.wait_for(timeout=30_000)  # the score event's title
    text = page.inner_text("body")
    assert "were removed" not in text and "No events to display" not in text
