"""`python -m lexpilot.scripted --port P`: the scripted provider as a server (README: "Try every stage without a
provider")."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

from lexpilot.scripted.provider import FakeProvider
from lexpilot.scripted.replies import models_differ


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
    parser.add_argument(
        "--models-differ",
        action="store_true",
        help="each evaluated model answers in its own way, "
        "so that comparisons and rankings have something to show (the replies stay canned)",
    )
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
    return parser


def main(argv=None) -> int:
    """`python -m lexpilot.scripted --port P`: the scripted provider as a server on 127.0.0.1, to try every stage
    without a provider (OPENAI_BASE_URL=http://127.0.0.1:P/v1, any OPENAI_API_KEY). Ctrl-C stops it."""
    args = command_line().parse_args(argv)
    provider = FakeProvider(
        models_differ if args.models_differ else None,
        latency=args.latency,
        jitter=args.jitter,
        rate_limit=args.rate_limit,
    )
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
