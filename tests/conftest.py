"""The fixtures every test can ask for: a clean environment, the scripted provider, a harness, a browser and a warm
interpreter. What test files share besides fixtures is in tests/helpers/."""

import os
import shutil

import pytest

from lexpilot.scripted.provider import ScriptedProvider
from tests.helpers.paths import ROOT
from tests.helpers.stages import SECRET, Harness


@pytest.fixture(scope="session", autouse=True)
def quick_backoff():
    """Retries after a millisecond, not a second, in module and session fixtures too: they are made before a test's
    `clean_env`, and a fixture's run whose replies were cut waited out 12 s of backoff."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setenv("LEXPILOT_BACKOFF_BASE", "0.001")
        yield


@pytest.fixture(autouse=True)
def clean_env(monkeypatch, tmp_path_factory):
    for name in list(os.environ):
        if name.startswith(("LEXPILOT_", "OPENAI_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("LEXPILOT_BACKOFF_BASE", "0.001")
    # each test its own score cache
    monkeypatch.setenv("LEXPILOT_CACHE", str(tmp_path_factory.mktemp("scores")))


@pytest.fixture
def provider():
    """A scripted provider; its HTTP server starts only when a test asks for its base URL's traffic."""
    with ScriptedProvider() as p:
        yield p


@pytest.fixture
def http(provider, monkeypatch):
    """The scripted provider over HTTP, as every role's endpoint (the environment's base URL and key)."""
    monkeypatch.setenv("OPENAI_BASE_URL", provider.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    return provider


@pytest.fixture
def harness(tmp_path, provider, monkeypatch):
    return Harness(tmp_path, provider, monkeypatch)


CHROMIUM = os.environ.get("LEXPILOT_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def browser():
    """Chromium, for one test file: Playwright's running event loop and threads end with it, so the tests after it
    on the worker (asyncio.run, a fork) find none."""
    if not CHROMIUM:
        if os.environ.get("CI"):
            pytest.fail("no Chromium: .ci/run installs the distribution's chromium for these tests")
        pytest.skip("no Chromium found (apt-get install chromium, or set LEXPILOT_CHROMIUM)")
    playwright = pytest.importorskip("playwright.sync_api")
    with playwright.sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield b
        b.close()


@pytest.fixture(scope="module")
def tab(browser):
    """One browser tab for a test file. A new page starts a renderer process, about a second of CPU; taking a tab to
    another page costs half that (the viewer's tests opened 80 pages)."""
    page = browser.new_page()
    page.errors = []  # the script errors of the page shown since `open_page` gave the tab
    page.on("pageerror", lambda error: page.errors.append(str(error)))
    return page


@pytest.fixture
def open_page(tab):
    """`open_page(width)`: the file's tab on a blank page of that width, no script error seen yet. Each test starts
    from a blank page, so that nothing of the page a test before it left (its document, its script) is there. The
    tab's browser context stays (cookies, storage, cache, history): the viewer keeps nothing in them, only the
    address (`history.replaceState`), which a new page's load sets anew."""

    def opened(width: int = 1280, height: int = 900):
        tab.goto("about:blank")
        tab.set_viewport_size({"width": width, "height": height})
        tab.errors.clear()
        return tab

    return opened


@pytest.fixture(scope="session")
def warm_interpreter(tmp_path_factory):
    """Scripts started as real processes forked from one warm interpreter per worker (tests/helpers/warm.py)."""
    from tests.helpers.warm import Warm

    interpreter = Warm(tmp_path_factory.mktemp("warm"))
    yield interpreter
    interpreter.close()


@pytest.fixture
def warm(warm_interpreter):
    """The warm interpreter, for one test: the processes it started and left running are killed as it ends."""
    yield warm_interpreter
    warm_interpreter.reap()


@pytest.fixture
def redis_server(tmp_path):
    """A redis-server of the test's own (tests/helpers/redis_server.py), stopped after it."""
    from tests.helpers.redis_server import started_redis

    server = started_redis(tmp_path)
    yield server
    if server.process.poll() is None:
        server.stop()


@pytest.fixture(scope="session")
def abilities_grid(tmp_path_factory, worker_id):
    """Two models of set abilities and a judge of set confusion (tests/helpers/abilities.py), two runs of LexAwN,
    DCG and Direct LJP on 60 cases, written once per session (in the folder the workers share): read, never
    written, by the tests that use it."""
    from tests.helpers.abilities import shared_simulation

    base = tmp_path_factory.getbasetemp()
    folder = (
        base / "abilities" if worker_id == "master" else base.parent / "abilities"
    )  # the session's, shared
    return shared_simulation(folder, 60, ("run1", "run2"), ("LexAwN", "DCG", "direct"))


def pytest_collection_modifyitems(items):
    """The files that mostly wait first (tests/helpers/scheduling.py: one worker runs them beside the others), then
    the longest files, longest first, then the other files that hold slow tests (kills, grids, a browser): the long
    tests start at once and the short ones fill the end, instead of one worker finishing a long file alone at the
    end."""
    from tests.helpers.scheduling import start_order

    slow_files = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: start_order(item.nodeid, item.path in slow_files))


def pytest_configure(config):
    """Temporary files in memory; the project's modules compiled once for every process the suite starts
    (tests/helpers/compile_ahead.py); the controller of several workers rewrites the test files' asserts once for
    all of them (tests/helpers/rewrite_ahead.py)."""
    controller = not hasattr(config, "workerinput")
    if controller and not config.option.basetemp:
        from tests.helpers.temporary import in_memory_temporary_files

        in_memory_temporary_files(os.environ)
    if controller:
        from tests.helpers.compile_ahead import compile_ahead

        compile_ahead(ROOT)  # the project's, whatever folder pytest takes for its root
    workers = getattr(config.option, "numprocesses", None)
    if (
        controller
        and isinstance(workers, int)
        and workers > 1
        and config.getoption("assertmode") == "rewrite"
    ):
        from tests.helpers.rewrite_ahead import rewrite_ahead

        rewrite_ahead(config, config.rootpath / "tests")


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook: `-p no:xdist` runs without it
def pytest_xdist_make_scheduler(config, log):
    """`--dist loadscope` (pytest.ini), the files that mostly wait kept together as one scope."""
    if config.getoption("dist") == "loadscope":
        from tests.helpers.scheduling import WaitingApart

        return WaitingApart(config, log)
    return None
