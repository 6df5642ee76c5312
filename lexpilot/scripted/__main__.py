"""`python -m lexpilot.scripted --port P`: the scripted provider as a server (README: "Try every stage without a
provider")."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

from lexpilot.errors import HarnessError
from lexpilot.scripted.provider import IDENTITY, IDENTITY_PATH, ScriptedProvider
from lexpilot.scripted.replies import models_differ
from lexpilot.scripted.served import ServedAs, switching


def command_line():
    """The scripted server's options."""
    import argparse

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds before each reply")
    parser.add_argument("--jitter", type=float, default=0.0, help="up to this many seconds more, per prompt")
    parser.add_argument(
        "--rate-limit",
        type=float,
        help="requests a second it answers; beyond, HTTP 429 with "
        "Retry-After (as a provider's rate limit counts)",
    )
    _add_script_options(parser)
    parser.add_argument(
        "--log",
        type=Path,
        metavar="FILE",
        help="append a JSON line per chat request there: its "
        'model, role, output limit, temperature and a digest of its prompt ("batch": true for a request answered in a batch)',
    )
    parser.add_argument(
        "--batch-delay",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="a batch is answered this long after it is created "
        "(to try --batch-detach, --batch-status and Ctrl-C while batches are in flight)",
    )
    _add_flex_options(parser)
    parser.add_argument(
        "--check",
        metavar="BASE_URL",
        help="do not serve: wait (up to --wait seconds) until the scripted provider answers at BASE_URL, exit 0; "
        "exit 2 at once with one line when another program answers there (the port was taken)",
    )
    parser.add_argument(
        "--wait",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="with --check: how long to wait (default 10)",
    )
    return parser


def _add_script_options(parser) -> None:
    """How the evaluated models answer: canned alike, canned each its own way, or with set abilities."""
    chosen = parser.add_mutually_exclusive_group()
    chosen.add_argument(
        "--models-differ",
        action="store_true",
        help="each evaluated model answers in its own way, "
        "so that comparisons and rankings have something to show (the replies stay canned)",
    )
    chosen.add_argument(
        "--abilities",
        type=Path,
        metavar="FILE",
        help="each evaluated model answers right as often as FILE says (TOML: per model and task, with run-to-run "
        "noise), and the judge errs as often as it says, per label (lexpilot/scripted/abilities.py; a run is "
        "what the base URL names: http://127.0.0.1:P/run1/v1); needs --dataset",
    )
    parser.add_argument(
        "--dataset", type=Path, metavar="FILE", help="with --abilities: the dataset the runs use"
    )
    parser.add_argument(
        "--expected",
        action="store_true",
        help="with --abilities: do not serve; print each model's metrics as the abilities make them expected on "
        "the dataset, true and as the judge's confusion scores them",
    )


def _add_flex_options(parser) -> None:
    """How it plays today's providers: the flex tier (a request's service_tier "flex"), to try --service-tier and
    --flex-fallback, and what answers a model id, to try --allow-served-model-change."""
    parser.add_argument(
        "--served-as",
        action="append",
        default=[],
        metavar="REQUESTED=SERVED[@N]",
        help="answer the model id REQUESTED as SERVED (an alias, a re-pointed id), from its first request, or "
        "after its first N requests (a provider that changes what answers while a run goes on); repeatable",
    )
    parser.add_argument(
        "--fingerprint", metavar="FP", help="the system_fingerprint every reply carries (default: none)"
    )
    parser.add_argument(
        "--flex-latency",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="a flex request's reply comes this much later",
    )
    parser.add_argument(
        "--flex-unavailable",
        type=float,
        default=0.0,
        metavar="SHARE",
        help="refuse this share of flex requests (0 to 1, spread evenly) with a 429 'resource unavailable'",
    )
    parser.add_argument(
        "--flex-refused",
        action="append",
        default=[],
        metavar="MODEL",
        help="this model refuses the flex tier with a 400, as a model without it does (repeatable)",
    )


def check(base_url: str, wait: float) -> int:
    """Whether the scripted provider answers at the base URL: 0, or 2 with one line saying what answers there."""
    import json
    import time
    import urllib.error
    import urllib.request

    deadline = time.monotonic() + wait
    while True:
        try:
            with urllib.request.urlopen(base_url.rstrip("/") + IDENTITY_PATH, timeout=2) as answer:
                said = json.loads(answer.read(10_000) or b"null")
            if said == IDENTITY:
                print(f"scripted provider at {base_url}: ready", flush=True)
                return 0
            problem = "another program answers there"
        except urllib.error.HTTPError as e:
            problem = f"another program answers there (HTTP {e.code})"
        except (ValueError, UnicodeDecodeError):
            problem = "another program answers there"
        except OSError as e:  # nothing listens yet: the provider may still be starting
            if time.monotonic() < deadline:
                time.sleep(0.1)
                continue
            print(
                f"scripted provider: not at {base_url}: nothing answers there within {wait:g} s "
                f"({getattr(e, 'reason', e)}); did it start? Its own line says why not",
                file=sys.stderr,
            )
            return 2
        print(
            f"scripted provider: not at {base_url}: {problem}; the stages would call it instead. Stop what holds "
            "the port, or start the provider with another --port (and set OPENAI_BASE_URL to match)",
            file=sys.stderr,
        )
        return 2


def print_expected(args) -> int:
    """`--expected`: each model's true and judged expected metrics, one line per metric."""
    from lexpilot.benchmark.dataset import load_dataset
    from lexpilot.scripted.abilities import read_abilities
    from lexpilot.scripted.expected import expected_metrics

    if args.abilities is None or args.dataset is None:
        raise HarnessError("--expected needs --abilities FILE and --dataset FILE")
    abilities = read_abilities(args.abilities)
    cases, _ = load_dataset(args.dataset)
    true, judged = expected_metrics(abilities, cases), expected_metrics(abilities, cases, judged=True)
    print(f"{'model':<16} {'metric':<26} {'true':>6} {'judged':>7}")
    for model, metrics in true.items():
        for (task, metric), value in metrics.items():
            print(
                f"{model:<16} {task + ' ' + metric:<26} {value:>6.3f} {judged[model][(task, metric)]:>7.3f}"
            )
    return 0


def chosen_script(args, provider: ScriptedProvider):
    """The script the options choose: the abilities file's (read and checked now), `--models-differ`, or none."""
    if args.abilities is None:
        if args.dataset is not None:
            raise HarnessError("--dataset is read with --abilities only; give both, or neither")
        return models_differ if args.models_differ else None
    if args.dataset is None:
        raise HarnessError("--abilities needs --dataset FILE: the dataset the runs use")
    from lexpilot.benchmark.dataset import load_dataset
    from lexpilot.scripted.abilities import read_abilities
    from lexpilot.scripted.playing import playing

    abilities = read_abilities(args.abilities)
    cases, _ = load_dataset(args.dataset)
    return playing(provider, abilities, cases, str(args.dataset))


def main(argv=None) -> int:
    """`python -m lexpilot.scripted --port P`: the scripted provider as a server on 127.0.0.1, to try every stage
    without a provider (OPENAI_BASE_URL=http://127.0.0.1:P/v1, any OPENAI_API_KEY). Ctrl-C stops it."""
    args = command_line().parse_args(argv)
    if args.check:
        return check(args.check, args.wait)
    if args.expected:
        try:
            return print_expected(args)
        except HarnessError as e:
            print(f"scripted provider: {e}", file=sys.stderr)
            return 2
    try:
        served_as = [ServedAs.parse(text) for text in args.served_as]
    except ValueError as e:
        print(f"scripted provider: {e}", file=sys.stderr)
        return 2
    provider = ScriptedProvider(latency=args.latency, jitter=args.jitter, rate_limit=args.rate_limit)
    try:
        script = chosen_script(args, provider)
    except HarnessError as e:
        print(f"scripted provider: {e}", file=sys.stderr)
        return 2
    provider.script = switching(provider, served_as, script) if served_as else script
    provider.fingerprint = args.fingerprint
    if args.log:
        try:
            provider.log = args.log.open("a", encoding="utf-8")
        except OSError as e:
            print(
                f"scripted provider: --log {args.log}: cannot write there ({e.strerror or e})",
                file=sys.stderr,
            )
            return 2
    provider.port, provider.batch_delay = args.port, args.batch_delay
    provider.flex_latency, provider.flex_unavailable = args.flex_latency, args.flex_unavailable
    provider.flex_refused = set(args.flex_refused)
    try:
        url = provider.start()
    except OSError as e:
        print(
            f"scripted provider: cannot listen on 127.0.0.1:{args.port} ({e.strerror or e})", file=sys.stderr
        )
        return 2
    print(f"scripted provider at {url} (every role; any key); Ctrl-C stops it", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        provider.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
