"""The README's loop over every stage of a run, against `python -m lexpilot.scripted` as a server: it names every
stage run per model and run, and every script in it finishes; and the scripted server's command line gives what a
user trying the harness needs (rate limits, batch delays, models that differ, a request log, a port it must own)."""

import re
import runpy
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import show_results
from lexpilot.protocols.catalog import STAGE_SETS
from tests.helpers.paths import ROOT

# kills, Ctrl-C, Redis, browsers or whole grids: left out of the quick loop (-m "not slow")
pytestmark = pytest.mark.slow

README = (ROOT / "README.md").read_text(encoding="utf-8")
LOOP = re.search(r"python -m lexpilot\.scripted --port 8765 &\n(.*?)\n```", README, re.S).group(1)


def test_the_loop_names_every_stage_run_per_model_and_run():
    scripts = re.search(r"for script in (.*?); do", LOOP).group(1).split()
    assert [s.removesuffix(".py") for s in scripts] == list(STAGE_SETS["all"])


def test_every_stage_of_the_loop_runs_against_the_scripted_server(tmp_path, monkeypatch, capsys):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "lexpilot.scripted", "--port", str(port)],
        cwd=ROOT,  # as README
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert "scripted provider at" in server.stdout.readline()
        monkeypatch.setenv("OPENAI_BASE_URL", f"http://127.0.0.1:{port}/v1")
        monkeypatch.setenv("OPENAI_API_KEY", "any")
        monkeypatch.setenv("LEXPILOT_MODEL", "try-model")
        monkeypatch.chdir(ROOT)
        for script in re.search(r"for script in (.*?); do", LOOP).group(1).split():
            argv = [
                "--run-id",
                "try",
                "--limit",
                "2",
                "--dataset",
                "data/LexPilot_sample.json",
                "--output-root",
                str(tmp_path / "try-out"),
            ]
            monkeypatch.setattr(sys, "argv", [script, *argv])
            with pytest.raises(SystemExit) as ended:
                runpy.run_path(str(ROOT / script), run_name="__main__")
            assert ended.value.code == 0, script
        assert show_results.main(["--output-root", str(tmp_path / "try-out")]) == 0
        assert "Main results (Table 11)" in capsys.readouterr().out
    finally:
        server.terminate()
        server.wait(timeout=10)


def test_the_scripted_server_takes_the_grid_benchmarks_rate_limit_from_its_command_line():
    """The rate limit the grid's tests and benchmark put on an endpoint is on the command line too, not in the Python
    class only, so that a user can reproduce their setup."""
    import json
    import urllib.error
    import urllib.request

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "lexpilot.scripted",
            "--port",
            str(port),
            "--rate-limit",
            "3",
            "--latency",
            "0.01",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert "scripted provider at" in server.stdout.readline()
        statuses = []
        body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "你好"}]}).encode()
        for _ in range(6):  # within a second: the fourth and later are refused
            request = urllib.request.Request(
                f"http://127.0.0.1:{port}/v1/chat/completions", body, {"Content-Type": "application/json"}
            )
            try:
                with urllib.request.urlopen(request, timeout=10) as reply:
                    statuses.append(reply.status)
            except urllib.error.HTTPError as e:
                statuses.append((e.code, e.headers.get("Retry-After")))
        assert statuses[:3] == [200] * 3 and (429, "0.2") in statuses[3:], statuses
    finally:
        server.terminate()
        server.wait(timeout=10)


def two_models_through_the_scripted_server(root: Path, log: Path, monkeypatch) -> None:
    """`python -m lexpilot.scripted --models-differ --log LOG` on a free port, and models a and b through DCG and
    Direct LJP on the sample against it, under `root`."""
    from lexpilot.running.stage import stage_main
    from tests.helpers.stages import STAGES

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "lexpilot.scripted",
            "--port",
            str(port),
            "--models-differ",
            "--log",
            str(log),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert "scripted provider at" in server.stdout.readline()
        monkeypatch.setenv("OPENAI_BASE_URL", f"http://127.0.0.1:{port}/v1")
        monkeypatch.setenv("OPENAI_API_KEY", "sk-try-SECRET-0123456789")
        for model in ("model-a", "model-b"):
            for stage in ("DCG", "direct"):
                argv = [
                    "--run-id",
                    "try",
                    "--model",
                    model,
                    "--dataset",
                    str(ROOT / "data" / "LexPilot_sample.json"),
                    "--output-root",
                    str(root),
                ]
                assert stage_main(STAGES[stage], "t", argv=argv) == 0
    finally:
        server.terminate()
        server.wait(timeout=10)


def test_the_scripted_server_lets_models_differ_and_logs_each_request_without_its_key(
    tmp_path, monkeypatch, capsys
):
    """ "The scripted provider gets what a user trying the harness needs: a request log, ... and
    per-model behaviour, so that the compare views show something." Two models through DCG and Direct LJP on the
    sample: their outcomes differ under --models-differ, and the log has a line per request, with no key."""
    import json

    log = tmp_path / "requests.jsonl"
    two_models_through_the_scripted_server(tmp_path / "out", log, monkeypatch)
    lines = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]
    by_model = {m: sum(line["model"] == m for line in lines) for m in ("model-a", "model-b")}
    assert by_model["model-a"] == by_model["model-b"] > 0 and "SECRET" not in log.read_text(encoding="utf-8")
    assert {line["kind"] for line in lines} >= {"force_ask", "user", "dcg_judge", "force_judge", "ljp_judge"}
    capsys.readouterr()
    assert show_results.main(["--output-root", str(tmp_path / "out"), "--format", "json"]) == 0
    groups = {g["model"]: g["metrics"] for g in json.loads(capsys.readouterr().out)["groups"]}
    outcomes = [
        (groups[m]["dcg"]["accuracy"]["overall"]["mean"], groups[m]["ljp_direct"]["qwk"]["overall"]["mean"])
        for m in ("model-a", "model-b")
    ]
    assert outcomes[0] != outcomes[1], outcomes


def test_the_scripted_server_takes_a_batch_delay_from_its_command_line():
    """Without it, --batch-detach, --batch-status and a Ctrl-C while batches are in
    flight could not be tried from the README alone (every batch was answered at its first retrieve)."""
    import openai

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [sys.executable, "-m", "lexpilot.scripted", "--port", str(port), "--batch-delay", "30"]
    server = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert "scripted provider at" in server.stdout.readline()
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="any", max_retries=0)
        line = b'{"custom_id": "a", "method": "POST", "url": "/v1/chat/completions", "body": {"model": "m", '
        line += b'"messages": [{"role": "user", "content": "hi"}]}}\n'
        uploaded = client.files.create(file=("b.jsonl", line), purpose="batch")
        made = client.batches.create(
            input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
        )
        assert client.batches.retrieve(made.id).status == "in_progress"  # 30 s to go
    finally:
        server.terminate()
        server.wait(timeout=10)


def test_the_request_log_has_a_line_per_request_answered_in_a_batch_too(tmp_path, http):
    """Checking that a killed batch grid pays nothing twice needs batch requests in the --log, not only the
    provider's batches: each has its line, marked as batched."""
    import json
    from collections import Counter

    from lexpilot.running.stage import stage_main
    from tests.helpers.datasets import sample_cases, write_dataset
    from tests.helpers.stages import STAGES

    log, three_cases = tmp_path / "requests.jsonl", write_dataset(tmp_path / "three.json", sample_cases()[:3])
    with log.open("a", encoding="utf-8") as http.log:
        argv = ["--run-id", "r", "--model", "model-a", "--dataset", str(three_cases)]
        argv += ["--output-root", str(tmp_path), "--batch", "--batch-poll", "0.02"]
        assert stage_main(STAGES["gold"], "t", argv=argv) == 0
    lines = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]
    asked = Counter(line["body"]["model"] for b in http.batches.values() for line in b["_lines"])
    # by hand: 3 cases, each a prediction by the evaluated model, then the judge's extraction, both in batches
    assert asked == {"model-a": 3, "DeepSeek-R1": 3}
    assert Counter(line["model"] for line in lines if line.get("batch")) == asked and len(lines) == 6


def readme_block(port: int, root: Path) -> str:
    """The README's try-out as written, on another port and output root."""
    block = re.search(r"```bash\n(python -m lexpilot\.scripted --port 8765 &\n.*?)\n```", README, re.S).group(
        1
    )
    return block.replace("8765", str(port)).replace("try-out", str(root))


def test_the_try_out_stops_at_once_when_another_program_holds_its_port(tmp_path):
    """ "With port 8765 taken by another program, the scripted provider printed `cannot listen …
    Address already in use`, and every stage then ran against the other program without a word. The try-out must
    fail at once when its provider did not start." Another program answers HTTP on the port; the README's block,
    run by bash as written, runs no stage."""
    import http.server
    import threading
    import time

    other = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=other.serve_forever, daemon=True).start()
    try:
        started = time.monotonic()
        done = subprocess.run(
            ["bash", "-c", readme_block(other.server_address[1], tmp_path / "out")],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        other.shutdown()
    said = done.stdout + done.stderr
    # (the provider's own "cannot listen" line may not come: the check need not wait for it, and kill %1 ends it)
    assert "another program answers there" in said, said
    assert "[LexAwN]" not in said and not (tmp_path / "out").exists()  # no stage ran, nothing was written
    assert time.monotonic() - started < 60


def test_the_check_waits_for_the_scripted_provider_and_says_when_it_is_ready():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1"
    check = subprocess.Popen(
        [sys.executable, "-m", "lexpilot.scripted", "--check", url],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    server = subprocess.Popen(
        [sys.executable, "-m", "lexpilot.scripted", "--port", str(port)], cwd=ROOT, stdout=subprocess.PIPE
    )
    try:
        assert check.wait(timeout=60) == 0
        assert check.stdout.read().strip() == f"scripted provider at {url}: ready"
    finally:
        server.terminate()
        server.wait(timeout=10)
