"""A redis-server of the test's own on a free loopback port (Debian's; skipped where it is absent, a failure in CI,
whose .ci/run installs it), what the Redis tests ask of a limiter or of run_grid.py against one, and what they
compare a faulty grid with."""

import json
import os
import shutil
import socket
import subprocess
import time
from collections import Counter

import pytest

from lexpilot.errors import Aborted
from lexpilot.scripted.provider import ScriptedProvider
from tests.helpers.datasets import sample_cases, write_dataset
from tests.helpers.grids import grid
from tests.helpers.paths import ROOT
from tests.helpers.warm import run as warm_run

REDIS = shutil.which("redis-server")


class RedisServer:
    """A redis-server of its own on a free port, with nothing saved to disk; stop() and start() again restart it."""

    def __init__(self, folder, *options: str):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.folder, self.process, self.options = folder, None, list(options)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.process = subprocess.Popen(
            [
                REDIS,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.folder),
                *self.options,
            ],
            stdout=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("redis-server did not start")

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(10)

    def client(self):
        import redis

        return redis.Redis(port=self.port)


def waits(limiter, seconds: float = 0.3) -> bool:
    """Whether a call waits `seconds` without a slot (it is stopped then)."""
    deadline = time.monotonic() + seconds
    try:
        limiter.release(lease=limiter.acquire(lambda: time.monotonic() > deadline))
    except Aborted:
        return True
    return False


def limits_error(tmp_path, capsys, url, *extra) -> tuple[int, str]:
    """run_grid.py with --limits URL against the scripted provider: (exit status, what it printed), with no call."""
    import run_grid

    tmp_path.mkdir(exist_ok=True)
    dataset = write_dataset(tmp_path / "one.json", sample_cases()[:1])
    with ScriptedProvider() as p:
        os.environ["OPENAI_BASE_URL"], os.environ["OPENAI_API_KEY"] = p.base_url, "k"
        try:
            code = run_grid.main(
                [
                    "--models",
                    "m",
                    "--runs",
                    "1",
                    "--dataset",
                    str(dataset),
                    "--output-root",
                    str(tmp_path),
                    "--limits",
                    url,
                    *extra,
                ]
            )
        finally:
            del os.environ["OPENAI_BASE_URL"], os.environ["OPENAI_API_KEY"]
        assert not p.requests
    return code, capsys.readouterr().err.strip()


def started_redis(tmp_path) -> RedisServer:
    """A started redis-server of the test's own (the test skipped without one)."""
    if not REDIS:
        if os.environ.get("CI"):
            pytest.fail("no redis-server: .ci/run installs the distribution's redis-server for these tests")
        pytest.skip("no redis-server (apt-get install redis-server)")
    pytest.importorskip("redis")
    server = RedisServer(tmp_path)
    server.start()
    return server


def clean_run(warm, root, dataset, env, *providers) -> Counter:
    """An unsharded grid without Redis: what the providers processed for it, per request (then forgotten)."""
    clean = warm_run(warm, grid(root, dataset), ROOT, env)
    assert clean.returncode == 0, clean.stderr
    processed = sum((Counter(p.processed) for p in providers), Counter())
    for p in providers:
        p.processed.clear()
    return processed


def unanswered(root) -> int:
    return sum(sum(json.loads(p.read_text()).values()) for p in root.glob("runs/*/*/unanswered_calls.json"))
