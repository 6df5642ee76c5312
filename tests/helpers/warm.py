"""Entry-point scripts started as real processes without paying their start-up each time: one warm interpreter per
test worker imports the OpenAI SDK and what the scripts import at their top once (about a second of CPU), then forks
a process per start.

The kill and Ctrl-C tests start the grid and the stages dozens of times each; started from scratch, each start spent
most of its time importing before its first request (a suite's time is a developer's loop). A forked
process is a real process: it has its own pid, runs the script as `python script.py ...` would (`__main__`, argv, the
working folder, the environment, stdout and stderr to files, non-daemon threads joined and atexit run as it leaves),
and a kill -9 or a Ctrl-C reaches only it. The child runs only the thread that forked it.

What a fork cannot be is a fresh start, so each test that uses one keeps a fresh `python script.py` where it counts:
- the project's modules a script imports inside functions are left to each process, so that a module a fresh
  process would lack is not there by chance (the SDK and the Redis client, which the harness imports where first
  needed, are preloaded: an `import` of them runs the same in either); the random kills' tests complete their
  work in a fresh process, and tests/test_warm.py compares a forked start with a fresh one;
- forks share the warm interpreter's string hashing seed and the variables read at start-up (PYTHON*, the locale):
  a test whose rule is that processes agree whatever their seeds starts them fresh, and an `env` that changes a
  start-up variable is refused;
- the code is what the warm interpreter imported: a change to the project's files starts a new one;
- a forked start ends before the interpreter's teardown (`leave`), so objects left in the script's module are not
  released (a `__del__` there does not run, a file it never closed is not flushed); a traceback shows the warm
  interpreter's frames above the script's; an atexit handler sees this module as `__main__`.

`Warm.start` takes the command a test would give `subprocess.Popen` and returns a `Started` with Popen's methods."""

import ast
import atexit
import contextlib
import gc
import json
import os
import runpy
import select
import signal
import subprocess
import sys
import tempfile
import time
from importlib import import_module
from pathlib import Path
from typing import NoReturn

ROOT = Path(__file__).resolve().parents[2]
# the scripts the tests start through a warm interpreter: what they import at their top is imported once
SCRIPTS = ("run_grid.py", "LexAwN_gen.py", "eval_DCG.py", "eval_LJP.py")


def top_level_imports(script: Path) -> list[str]:
    """The modules a script imports at its top (not inside functions), as a fresh start of it imports them."""
    names = []
    for node in ast.parse(script.read_bytes()).body:
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names.append(node.module)
    return names


def preload() -> None:
    """The SDK (most of a start's second; the harness imports it where it first calls a model) and its transport,
    each script's top-level imports, the digests of the code a stage runs, which a manifest records (~0.1 s: the
    import graph is read from every file; cached by each file's time and size, so a file changed later is read
    again), and the TLS context."""
    import openai  # noqa: F401

    for script in SCRIPTS:
        for name in top_level_imports(ROOT / script):
            import_module(name)
    import_module("lexpilot.storage.code").code_digests()
    import_module("redis")  # the client the grid imports where it first shares a limit (~0.2 s of each start)
    # the TLS context every client of a process shares (the CA bundle parsed, and the SDK's transport imported:
    # ~0.3 s of each start), kept by a forked child as it keeps the modules: the tests' endpoints are plain HTTP
    import_module("lexpilot.models.calls").tls_context()


def prepare(ask: dict) -> str:
    """The forked process made what `python script.py` started with `ask`'s Popen arguments would be; the script."""
    if ask["terminal"]:  # as a shell starts a job at a terminal: Ctrl-C raises KeyboardInterrupt
        signal.signal(signal.SIGINT, signal.default_int_handler)
    for fd, path, flags in ((0, os.devnull, os.O_RDONLY), (1, ask["stdout"], 0), (2, ask["stderr"], 0)):
        opened = os.open(path, flags or os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(opened, fd)
        os.close(opened)
    os.chdir(ask["cwd"])
    os.environ.clear()
    os.environ.update(ask["env"])
    script = str(Path(ask["cwd"], ask["argv"][0]))
    sys.argv, sys.path[0] = [script, *ask["argv"][1:]], str(Path(script).parent)
    return script


def child(ask: dict, ending: dict) -> NoReturn:
    """In the forked process: the script run as `python script.py` runs it, then out the interpreter's own way, never
    back into the warm interpreter's loop. The script's end leaves `serve` and this module as it would leave a fresh
    interpreter's script: a SystemExit is its exit status; an uncaught exception is shown by sys.excepthook, status 1;
    an uncaught Ctrl-C is shown, then ends the process by SIGINT. Leaving through the interpreter joins the
    non-daemon threads (a thread that never ends shows as a hang) and runs atexit, as a fresh start does; `ending`
    keeps the status for `leave`."""
    try:
        runpy.run_path(prepare(ask), run_name="__main__")
    except SystemExit as exit:
        ending["status"] = exit.code if isinstance(exit.code, int) else int(exit.code is not None)
        raise
    except KeyboardInterrupt:
        ending["status"] = None  # ended by SIGINT, as Python ends after an uncaught Ctrl-C
        raise
    except Exception:
        sys.excepthook(*sys.exc_info())
        ending["status"] = 1
        raise SystemExit(1) from None
    ending["status"] = 0
    raise SystemExit(0)


def leave(ending: dict) -> None:
    """The last atexit handler of a forked child: once its threads are joined and every other handler has run, the
    process ends here with its script's status (`os._exit`, the documented way out of a forked child), without the
    teardown of the warm interpreter's preloaded modules (each object released writes to a page the fork shares:
    ~50 ms of CPU a start). A status beyond a byte, or a standard stream the script closed, is left to the
    interpreter's own exit, which says what a fresh start says. In the warm interpreter itself, nothing."""
    status = ending.get("status", "none ended")
    if status is not None and status not in range(256):
        return
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        return
    if status is None:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    os._exit(status)


def answer(ask: dict, ending: dict) -> dict:
    if ask["do"] == "start":
        pid = os.fork()
        if pid == 0:
            child(ask, ending)
        return {"pid": pid}
    pid, status = os.waitpid(ask["pid"], os.WNOHANG)
    return {"code": None if pid == 0 else os.waitstatus_to_exitcode(status)}


def serve() -> None:
    """The warm interpreter: one JSON request a line on stdin, one JSON answer (or error) a line on stdout."""
    ending: dict = {}  # how a forked child's script ended
    # registered first, so run last (atexit runs its handlers in reverse order)
    atexit.register(leave, ending)
    preload()
    # What is loaded is kept out of the cycle collector's walks: a forked child's collections would otherwise walk
    # the whole preloaded heap, writing to every object and so copying every page (gc.freeze's documented use)
    gc.freeze()
    for line in sys.stdin:
        try:
            reply = answer(json.loads(line), ending)
        except Exception as error:
            reply = {"error": f"{type(error).__name__}: {error}"}
        print(json.dumps(reply), flush=True)


def start_up_variables(env) -> dict:
    """The variables an interpreter reads as it starts: a fork keeps the warm interpreter's."""
    return {k: v for k, v in env.items() if k.startswith(("PYTHON", "LC_")) or k == "LANG"}


class Warm:
    """The warm interpreter of one test worker, started on first use, and the processes it started for a test."""

    def __init__(self, folder: Path):
        self.folder, self.process, self.code, self.started = folder, None, None, []

    def interpreter(self) -> subprocess.Popen:
        if self.process is None:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "tests.helpers.warm"],
                cwd=ROOT,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            self.code, self.startup = digests(), start_up_variables(os.environ)
        return self.process

    def ask(self, request: dict) -> dict:
        process = self.interpreter()
        try:
            process.stdin.write(json.dumps(request) + "\n")
            process.stdin.flush()
            line = process.stdout.readline()
        except BrokenPipeError:
            line = ""
        if not line:
            raise RuntimeError(f"the warm interpreter died (exit {process.wait(10)}): tests/helpers/warm.py")
        reply = json.loads(line)
        if "error" in reply:
            raise RuntimeError(f"the warm interpreter refused {request}: {reply['error']}")
        return reply

    def start(self, command: list[str], cwd, env: dict, terminal: bool = False) -> "Started":
        """`subprocess.Popen(command, cwd=cwd, env=env, ...)` with stdout and stderr kept, `command` being
        [sys.executable, script, args...] of the project; `terminal`: as `preexec_fn=as_at_a_terminal`."""
        assert command[0] == sys.executable and Path(cwd, command[1]).parent == ROOT, command
        if (
            self.process is not None and digests() != self.code
        ):  # the project changed: its code is imported anew
            self.close()
        self.interpreter()
        assert start_up_variables(env) == self.startup, "a start-up variable differs: start this one fresh"
        return self.fork(command, cwd, env, terminal)

    def fork(self, command: list[str], cwd, env: dict, terminal: bool = False) -> "Started":
        """`start` without its checks: any script (tests/test_warm.py's own), the warm interpreter as it is."""
        folder = Path(tempfile.mkdtemp(prefix="start-", dir=self.folder))
        ask = {"do": "start", "argv": command[1:], "cwd": str(cwd), "env": dict(env), "terminal": terminal}
        ask |= {"stdout": str(folder / "stdout"), "stderr": str(folder / "stderr")}
        started = Started(self, self.ask(ask)["pid"], folder, command)
        self.started.append(started)
        return started

    def reap(self) -> None:
        """A test's processes still running when it ends (it failed midway) killed, none left behind."""
        for started in self.started:
            started.send_signal(signal.SIGKILL)
            started.wait(30)
        self.started = []

    def close(self) -> None:
        self.reap()
        if self.process is not None:
            self.process.stdin.close()
            self.process.wait(timeout=30)
            self.process = None


def digests() -> dict:
    from lexpilot.storage.code import code_digests

    return code_digests(ROOT)


class Started:
    """A started script, as `subprocess.Popen` with text output: pid, poll, wait, send_signal, communicate."""

    def __init__(self, warm: Warm, pid: int, folder: Path, command: list[str]):
        self.warm, self.pid, self.folder, self.command, self.returncode = warm, pid, folder, command, None
        # Readable once the process has ended: a poll while it runs asks the warm interpreter nothing (the kill
        # tests poll every 5 ms). Opened while the process is running or unreaped (the warm interpreter reaps it
        # only when asked), so the pid is still its own. Where there is none (not Linux), every poll asks.
        self.ended = None
        with contextlib.suppress(AttributeError, OSError):  # a kernel before 5.3, or a sandbox refusing it
            self.ended = os.pidfd_open(pid)

    def poll(self):
        if self.returncode is None and (self.ended is None or select.select([self.ended], [], [], 0)[0]):
            self.returncode = self.warm.ask({"do": "poll", "pid": self.pid})["code"]
            if self.returncode is not None and self.ended is not None:
                os.close(self.ended)
                self.ended = None
        return self.returncode

    def wait(self, timeout: float = 60):
        end = time.monotonic() + timeout
        while self.poll() is None:
            if time.monotonic() > end:
                raise subprocess.TimeoutExpired(self.command, timeout)
            time.sleep(0.005)
        return self.returncode

    def send_signal(self, sig) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def said(self) -> str:
        """What the process has written to its stderr so far."""
        return (self.folder / "stderr").read_text(encoding="utf-8", errors="replace")

    def communicate(self, timeout: float = 60) -> tuple[str, str]:
        self.wait(timeout)
        read = [
            (self.folder / name).read_text(encoding="utf-8", errors="replace")
            for name in ("stdout", "stderr")
        ]
        return read[0], read[1]


def run(warm: Warm, command: list[str], cwd, env: dict, timeout: float = 120) -> subprocess.CompletedProcess:
    """`subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)`, warm."""
    started = warm.start(command, cwd, env)
    out, err = started.communicate(timeout)
    return subprocess.CompletedProcess(command, started.returncode, out, err)


def fresh(command: list[str], cwd, env: dict, timeout: float = 120) -> subprocess.CompletedProcess:
    """The same command in a fresh interpreter: what a user's `python script.py` is in every way."""
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


if __name__ == "__main__":
    serve()
