"""Entry-point scripts started as real processes without paying their imports each time: one warm interpreter per
test worker imports the harness and the OpenAI SDK once (about a second of CPU), then forks a process per start.

The kill and Ctrl-C tests start the grid and the stages dozens of times each; started from scratch, each start spent
most of its time importing before its first request (issue 37 item 9: a suite's time is a developer's loop). A forked
process is a real process: it has its own pid, runs the script as `python script.py ...` would (`__main__`, argv, the
working folder, the environment, stdout and stderr to files), and a kill -9 or a Ctrl-C reaches only it. The warm
interpreter runs no thread, so forking it is safe. What a fork shares with its siblings is the warm interpreter's
string hashing seed: a test whose rule is that two processes agree whatever their seeds (the shards' cell lists)
starts those processes fresh.

`Warm.start` takes the command a test would give `subprocess.Popen` and returns a `Started` with Popen's methods."""

import json
import os
import pkgutil
import runpy
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from importlib import import_module
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def preload() -> None:
    """Every module of the harness and the SDK, as each script would import them (a fresh process pays ~1 s),
    and the digests of the code a stage runs, which a manifest records (another ~0.7 s: the import graph is read
    from every file). Those are cached by each file's time and size, so a file changed later is read again."""
    import openai  # noqa: F401

    import lexpilot

    for module in pkgutil.walk_packages(lexpilot.__path__, "lexpilot."):
        if not module.name.endswith("__main__"):
            import_module(module.name)
    import_module("lexpilot.storage.code").code_digests()


def child(ask: dict) -> None:
    """In the forked process: the script run as `python script.py args` would run it, then exit with its code."""
    code = 1
    try:
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
        runpy.run_path(script, run_name="__main__")
        code = 0
    except SystemExit as exit:
        code = exit.code if isinstance(exit.code, int) else (0 if exit.code is None else 1)
        if isinstance(exit.code, str):
            print(exit.code, file=sys.stderr)
    except KeyboardInterrupt:  # as Python leaves on an uncaught Ctrl-C: killed by SIGINT
        traceback.print_exc()
        sys.stdout.flush(), sys.stderr.flush()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush(), sys.stderr.flush()
        os._exit(code)


def serve() -> None:
    """The warm interpreter: one JSON request a line on stdin, one JSON answer a line on stdout."""
    preload()
    for line in sys.stdin:
        ask = json.loads(line)
        if ask["do"] == "start":
            pid = os.fork()
            if pid == 0:
                child(ask)
            answer = {"pid": pid}
        else:
            pid, status = os.waitpid(ask["pid"], os.WNOHANG)
            answer = {"code": None if pid == 0 else os.waitstatus_to_exitcode(status)}
        print(json.dumps(answer), flush=True)


class Warm:
    """The warm interpreter of one test worker, started on first use."""

    def __init__(self):
        self.process = None

    def ask(self, request: dict) -> dict:
        if self.process is None or self.process.poll() is not None:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "tests.warm"],
                cwd=ROOT,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        return json.loads(self.process.stdout.readline())

    def start(self, command: list[str], cwd, env: dict, terminal: bool = False) -> "Started":
        """`subprocess.Popen(command, cwd=cwd, env=env, ...)` with stdout and stderr kept, `command` being
        [sys.executable, script, args...]; `terminal`: as `preexec_fn=as_at_a_terminal`."""
        assert command[0] == sys.executable and command[1].endswith(".py"), command
        folder = Path(tempfile.mkdtemp(prefix="warm-"))
        ask = {"do": "start", "argv": command[1:], "cwd": str(cwd), "env": dict(env), "terminal": terminal}
        ask |= {"stdout": str(folder / "stdout"), "stderr": str(folder / "stderr")}
        return Started(self, self.ask(ask)["pid"], folder)

    def close(self) -> None:
        if self.process is not None:
            self.process.stdin.close()
            self.process.wait(timeout=30)


class Started:
    """A started script, as `subprocess.Popen` with text output: pid, poll, wait, send_signal, communicate."""

    def __init__(self, warm: Warm, pid: int, folder: Path):
        self.warm, self.pid, self.folder, self.returncode = warm, pid, folder, None

    def poll(self):
        if self.returncode is None:
            self.returncode = self.warm.ask({"do": "poll", "pid": self.pid})["code"]
        return self.returncode

    def wait(self, timeout: float = 60):
        end = time.monotonic() + timeout
        while self.poll() is None:
            if time.monotonic() > end:
                raise subprocess.TimeoutExpired(str(self.pid), timeout)
            time.sleep(0.005)
        return self.returncode

    def send_signal(self, sig) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

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


if __name__ == "__main__":
    serve()
