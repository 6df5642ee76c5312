"""A model caller on its own, against the scripted provider, and scripted outcomes for its first calls."""

import argparse
import threading

from lexpilot.models.calls import ModelCaller
from lexpilot.running.stage import Progress
from lexpilot.settings import Settings, Transport, resolve_roles


def role_args(**kw):
    """The command line's role options, as argparse gives them to `resolve_roles`, `kw` over the defaults."""
    base = dict(
        model=None,
        user_model=None,
        judge_model=None,
        temperature=0.7,
        user_temperature=None,
        judge_temperature=0.1,
        max_tokens=8192,
        user_max_tokens=None,
        judge_max_tokens=None,
    )
    return argparse.Namespace(**{**base, **kw})


def make_caller(
    provider, retries=3, timeout=5.0, stream=False, max_tokens=8192, deadline=60.0, key="k", **args
):
    """A caller of the evaluated model "eval-m" at `provider`, with the transport's options as given."""
    roles = resolve_roles(
        role_args(model="eval-m", max_tokens=max_tokens, **args),
        {"OPENAI_BASE_URL": provider.base_url, "OPENAI_API_KEY": key},
    )
    settings = Settings(
        run_id="r",
        dataset=None,
        output_root=None,
        limit=None,
        roles=roles,
        max_tokens=max_tokens,
        transport=Transport(
            timeout=timeout,
            retries=retries,
            concurrency=1,
            stream=stream,
            call_deadline=deadline,
            backoff_base=0.001,
        ),
    )
    progress = Progress("t", 1, stream=open("/dev/null", "w"))
    return ModelCaller(settings, progress, threading.Event())


def script_of(*outcomes):
    """Scripted outcomes for the first calls, then the default reply."""
    queue = list(outcomes)
    lock = threading.Lock()

    def script(kind, prompt, body):
        with lock:
            return queue.pop(0) if queue else None

    return script
