"""Money: the price file (per model id, per million tokens), the cost of usage, and the hard budget of an
invocation (--max-cost), which no call may cross even at its worst case."""

from __future__ import annotations

import json
import math
import threading
import time
from pathlib import Path
from typing import Callable, NamedTuple

from lexpilot.errors import Aborted, FatalError, HarnessError
from lexpilot.files import check_input
from lexpilot.spending import Ledger, MemoryLedger
from lexpilot.windows import PEAK, WINDOW_KEYS, BadWindow, Windows, multiplier, read_windows

PRICED_COUNTS = ("calls", "prompt_tokens", "completion_tokens", "cached_prompt_tokens")


def price_class(tier: str | None = None, window: str | None = None) -> str:
    """The name of the prices a call was billed at, beside the standard ones ("": standard): the tier that served
    it (flex) and the price window it was sent in (peak), e.g. "flex", "peak", "flex+peak"."""
    return "+".join(part for part in (tier if tier == "flex" else None, window) if part)


def counted_key(kind: str, name: str) -> str:
    """A usage entry's count of calls of one kind ("served", "tier", "fingerprint") or one price class's field:
    flat keys, so that an entry stays a dict of whole numbers that any reader can sum."""
    return f"{kind}:{name}"


def counts_of(entry: dict, kind: str) -> dict[str, int]:
    """A usage entry's counts of one kind (counted_key's), by name: counts_of(e, "served") -> {model id: calls}."""
    prefix = counted_key(kind, "")
    return {
        key[len(prefix) :]: n
        for key, n in entry.items()
        if key.startswith(prefix) and isinstance(n, int) and not isinstance(n, bool)
    }


class Price(NamedTuple):
    prompt: float
    completion: float
    batch_prompt: float  # what the provider's batch API charges (the synchronous price where none is given)
    batch_completion: float
    # a prompt token served from the provider's cache (None: the prompt price)
    cached_prompt: float | None = None
    batch_cached_prompt: float | None = None
    # the flex tier's (None: the batch prices, as OpenAI bills flex)
    flex_prompt: float | None = None
    flex_completion: float | None = None
    flex_cached_prompt: float | None = None
    # prices by the clock: the peak windows (None: one price all day) and what a call sent in one pays, as
    # multipliers of (prompt, completion, cached prompt), whatever the tier (windows.py)
    windows: Windows | None = None
    peak: tuple[float, float, float] = (1.0, 1.0, 1.0)

    def rates(self, priced: str = "") -> tuple[float, float, float]:
        """(prompt, completion, cached prompt) per million tokens for calls of one price class (price_class)."""
        tiers = priced.split("+")
        rates = (
            self.prompt,
            self.completion,
            self.prompt if self.cached_prompt is None else self.cached_prompt,
        )
        if "flex" in tiers:
            batch_cached = self.batch_prompt if self.batch_cached_prompt is None else self.batch_cached_prompt
            rates = (
                self.batch_prompt if self.flex_prompt is None else self.flex_prompt,
                self.batch_completion if self.flex_completion is None else self.flex_completion,
                batch_cached if self.flex_cached_prompt is None else self.flex_cached_prompt,
            )
        if PEAK in tiers:
            rates = (rates[0] * self.peak[0], rates[1] * self.peak[1], rates[2] * self.peak[2])
        return rates

    def at_peak(self) -> Price:
        """These prices as a call sent in a peak window pays them (batch prices unchanged: a batch line carries no
        window, docs/cost.md)."""
        prompt, completion, cached = self.rates(PEAK)
        return self._replace(prompt=prompt, completion=completion, cached_prompt=cached, windows=None)

    def at(self, priced: str) -> Price:
        """These prices with a price class's rates as the synchronous ones (the batch ones unchanged): what a
        call of that class costs, for every sum written for the standard prices."""
        if not priced:
            return self
        prompt, completion, cached = self.rates(priced)
        return self._replace(prompt=prompt, completion=completion, cached_prompt=cached)


# per million tokens: above any provider's price; a larger one is a typo (or overflows sums)
MAX_PRICE = 10_000


class KeyedOnce(dict):
    """A JSON object as read, with the first key it gave twice (json's default keeps the last silently)."""

    twice: str | None = None


def _keyed_once(pairs: list) -> KeyedOnce:
    read = KeyedOnce()
    for key, value in pairs:
        if key in read and read.twice is None:
            read.twice = key
        read[key] = value
    return read


def _field(entry: dict, name: str, default: float | None, top: float) -> float:
    value = entry.get(name, default)
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or not 0 <= value <= top
    ):
        raise ValueError(f"{name} must be a number from 0 to {top:g}")
    return float(value)


def read_prices(path: Path) -> dict[str, Price]:
    """{"model id": {"prompt": P, "completion": C}, ...} per million tokens; an entry may add the batch API's
    prices ("batch_prompt", "batch_completion") or a discount on both ("batch_discount": 0.5 = half price).
    Every price is a number from 0 to MAX_PRICE, every discount from 0 to 1, and no key is given twice."""
    try:
        check_input(path)
        data = json.loads(path.read_text(encoding="utf-8"), object_pairs_hook=_keyed_once)
    except (FileNotFoundError, IsADirectoryError):
        raise HarnessError(f"--prices {path}: not found") from None
    except (ValueError, RecursionError) as e:
        raise HarnessError(f"--prices {path}: not JSON ({' '.join(str(e).split())[:80]})") from None
    if isinstance(data, KeyedOnce) and data.twice is not None:
        raise HarnessError(
            f"--prices {path}: model {data.twice!r} is given twice (JSON keeps only the last); give "
            "each model once"
        )
    if not isinstance(data, dict):  # said as an entry that is not one
        raise _bad_entry(path, None, KeyError("prompt"))
    prices: dict[str, Price] = {}
    for model, entry in data.items():
        if isinstance(entry, KeyedOnce) and entry.twice is not None:
            raise HarnessError(
                f"--prices {path}: entry {model!r} gives {entry.twice!r} twice (JSON keeps only the "
                "last); give each price once"
            )
        try:
            prices[model] = _price(entry)
        except BadWindow as e:
            raise HarnessError(f"--prices {path}: entry {model!r}: {e}") from None
        except (TypeError, KeyError, ValueError, AttributeError) as e:
            raise _bad_entry(path, model, e) from None
    return prices


def _bad_entry(path: Path, model: str | None, error: Exception) -> HarnessError:
    why = f" ({error})" if isinstance(error, ValueError) and str(error) else ""
    return HarnessError(
        f'--prices {path}: entry {model!r} must be {{"prompt": number, "completion": '
        "number} (price per million tokens; optional cached_prompt or cache_discount, "
        f"batch_prompt, batch_completion or batch_discount){why}"
    )


PEAK_PRICES = ("peak_prompt", "peak_completion", "peak_cached_prompt")
PRICE_KEYS = (
    "prompt",
    "completion",
    "cached_prompt",
    "cache_discount",
    "batch_prompt",
    "batch_completion",
    "batch_cached_prompt",
    "batch_discount",
    "flex_prompt",
    "flex_completion",
    "flex_cached_prompt",
    "flex_discount",
    *WINDOW_KEYS,
    *PEAK_PRICES,
)
EITHER = (
    ("flex_prompt", "flex_discount"),
    ("flex_completion", "flex_discount"),
    ("cached_prompt", "cache_discount"),
    ("batch_prompt", "batch_discount"),
    ("batch_completion", "batch_discount"),
    ("peak_multiplier", "peak_prompt"),
    ("peak_multiplier", "peak_completion"),
    ("peak_multiplier", "peak_cached_prompt"),
)


def _price(entry: object) -> Price:
    if not isinstance(entry, dict) or "prompt" not in entry or "completion" not in entry:
        raise KeyError("prompt")
    unknown = [k for k in entry if k not in PRICE_KEYS]
    if unknown:  # a misspelt key ("promt") would price nothing, in silence
        raise ValueError(f"{unknown[0]!r} is not a price key")
    both = next((pair for pair in EITHER if all(k in entry for k in pair)), None)
    if both:  # which one wins would be a guess
        raise ValueError(f"give {both[0]} or {both[1]}, not both")
    prompt, completion = (_field(entry, name, None, MAX_PRICE) for name in ("prompt", "completion"))
    factor = 1 - _field(entry, "batch_discount", 0, 1)
    cached = _field(entry, "cached_prompt", prompt * (1 - _field(entry, "cache_discount", 0, 1)), MAX_PRICE)
    batch = Price(
        prompt,
        completion,
        _field(entry, "batch_prompt", prompt * factor, MAX_PRICE),
        _field(entry, "batch_completion", completion * factor, MAX_PRICE),
        cached,
        _field(entry, "batch_cached_prompt", cached * factor, MAX_PRICE),
    )
    batch = _by_the_clock(entry, batch)
    if "flex_discount" not in entry and not any(k.startswith("flex_") for k in entry):
        return batch  # flex at the batch prices
    flex = 1 - _field(entry, "flex_discount", 0, 1)
    return batch._replace(
        flex_prompt=_field(entry, "flex_prompt", prompt * flex, MAX_PRICE),
        flex_completion=_field(entry, "flex_completion", completion * flex, MAX_PRICE),
        flex_cached_prompt=_field(entry, "flex_cached_prompt", cached * flex, MAX_PRICE),
    )


def _by_the_clock(entry: dict, price: Price) -> Price:
    """The entry's peak windows and what a call sent in one pays: a multiplier of every price, or peak prices of
    the standard tier (peak_prompt and peak_completion; peak_cached_prompt at the prompt's ratio unless given)."""
    windows = read_windows(entry)
    priced = "peak_multiplier" in entry or any(k in entry for k in PEAK_PRICES)
    if windows is None:
        if priced:
            raise BadWindow("a peak price without peak windows: give tz and peak too, or drop it")
        return price
    if "peak_multiplier" in entry:
        m = multiplier(entry["peak_multiplier"])
        return price._replace(windows=windows, peak=(m, m, m))
    if not all(k in entry for k in PEAK_PRICES[:2]):
        raise BadWindow(
            "peak windows without their price: give peak_multiplier (or peak_prompt and peak_completion)"
        )
    cached = price.prompt if price.cached_prompt is None else price.cached_prompt
    ratios: list[float] = []
    for key, base in zip(PEAK_PRICES, (price.prompt, price.completion, cached)):
        given = _field(entry, key, base * ratios[0] if ratios else None, MAX_PRICE)
        if base == 0 and given != 0:
            raise BadWindow(f"{key} {given:g}: the standard price is 0, so give peak_multiplier instead")
        ratios.append(multiplier(given / base, key) if base else 1.0)
    return price._replace(windows=windows, peak=(ratios[0], ratios[1], ratios[2]))


def cost(
    price: Price,
    prompt_tokens: float,
    completion_tokens: float,
    batched: float = 0.0,
    cached_tokens: float = 0.0,
) -> float:
    """The cost of tokens; `batched`: the share of the calls answered through the batch API; `cached_tokens`:
    the prompt tokens the provider served from its cache (at the cached-input price; without one in the price
    file, at the prompt price, so that nothing is under-reported)."""
    normal = rated_cost(price.rates(), prompt_tokens, completion_tokens, cached_tokens)
    batch_cached = price.batch_prompt if price.batch_cached_prompt is None else price.batch_cached_prompt
    batch_rates = (price.batch_prompt, price.batch_completion, batch_cached)
    batch = rated_cost(batch_rates, prompt_tokens, completion_tokens, cached_tokens)
    return (1 - batched) * normal + batched * batch


PRICE_PARTS = {"flex", PEAK}  # what a price class is made of (price_class)


def priced_classes(used: dict) -> list[str]:
    """The price classes other than the standard one that a usage entry counts calls of: only classes made of the
    parts a call is billed by (a record is untrusted: a served tier named "calls" is counted as "tier:calls", and is no
    price class)."""
    classes = {k.split(":", 1)[0] for k in used if k.endswith(":calls")}
    return sorted(c for c in classes if set(c.split("+")) <= PRICE_PARTS)


def usage_cost(price: Price, used: dict) -> float:
    """The cost of one role's usage entry: the calls of each price class at its rates, the rest at the standard
    prices (their batched share at the batch prices)."""
    total, rest = 0.0, {name: used.get(name, 0) for name in PRICED_COUNTS}
    for priced in priced_classes(used):
        counts = [used.get(counted_key(priced, name), 0) for name in PRICED_COUNTS]
        for i, n in enumerate(counts):
            rest[PRICED_COUNTS[i]] -= n
        total += rated_cost(price.rates(priced), counts[1], counts[2], counts[3])
    batched = used.get("batched_calls", 0) / rest["calls"] if rest["calls"] > 0 else 0.0
    rest_cost = cost(
        price, rest["prompt_tokens"], rest["completion_tokens"], batched, rest["cached_prompt_tokens"]
    )
    return total + rest_cost


def rated_cost(
    rates: tuple[float, float, float], prompt_tokens: float, completion_tokens: float, cached: float
) -> float:
    prompt, completion, cached_price = rates
    cached = min(cached, prompt_tokens)
    return ((prompt_tokens - cached) * prompt + cached * cached_price + completion_tokens * completion) / 1e6


def call_cost(
    price: Price,
    prompt: float,
    completion: float,
    cached: float = 0.0,
    batched: float = 0.0,
    priced: str = "",
) -> float:
    """One call's cost at its price class (price_class; "": standard, `batched` its share at the batch prices)."""
    if priced:
        return rated_cost(price.rates(priced), prompt, completion, cached)
    return cost(price, prompt, completion, batched, cached)


RESERVED_POLL = 0.1  # how often a call waiting for others' reservations to settle asks again


class BudgetExceeded(FatalError):
    """The next call could take the spending past --max-cost: the stage stops cleanly."""


class Budget:
    """--max-cost: spending so far plus the worst case of every call in flight stays within the amount. The
    spending is the ledger's (spending.py): one invocation's, an output root's, or a grid's across machines. A
    call's worst case counts its prompt at one token per character (Chinese text is about one token per character;
    other text fewer), or at the most its model's replies have counted a character since, and its completion at the
    role's output limit (or past it, by as much as its model's replies have gone past)."""

    def __init__(self, amount: float, prices: dict[str, Price], ledger: Ledger | None = None):
        self.amount, self.prices = amount, prices
        self.ledger: Ledger = ledger or MemoryLedger()
        # model id -> (the most prompt tokens a character came to, the most completion tokens past the output limit)
        # in its replies: a tokenizer that counts Chinese at more than one token a character (SmolLM2's: 1.18), or a
        # server that reports one token past the limit (llama.cpp), raises that model's worst case from then on
        self.learned: dict[str, tuple[float, int]] = {}
        self.lock = threading.Lock()

    def learn(
        self,
        model: str,
        prompt_chars: int,
        max_tokens: int,
        prompt_tokens: int | None,
        completion_tokens: int | None,
    ) -> None:
        """What a reply says of its model's tokens, for the worst case of its next calls."""
        if prompt_tokens is None or prompt_chars <= 0:
            return
        with self.lock:
            ratio, over = self.learned.get(model, (1.0, 0))
            self.learned[model] = (
                max(ratio, prompt_tokens / prompt_chars),
                max(over, (completion_tokens or 0) - max_tokens),
            )

    @property
    def spent(self) -> float:
        return self.ledger.totals().spent

    @property
    def reserved(self) -> float:
        return self.ledger.totals().reserved

    def reserve(
        self,
        model: str,
        prompt_chars: int,
        max_tokens: int,
        batched: float = 0.0,
        priced: str = "",
        stopped: Callable[[], bool] | None = None,
    ) -> float:
        """The call's worst case, reserved (at the price class it is asked at: "" the standard). With `stopped` (a
        synchronous call), a call that would fit beside what is spent waits while others' reservations fill the
        cap (their calls end, or a dead process's are counted as spent), Aborted once `stopped()`; without, and
        where what is spent leaves no room, BudgetExceeded."""
        with self.lock:
            ratio, over = self.learned.get(model, (1.0, 0))
        worst = call_cost(
            self.prices[model], prompt_chars * ratio, max_tokens + over, batched=batched, priced=priced
        )
        while True:
            ok, totals = self.ledger.reserve(worst, self.amount)
            if ok:
                return worst
            if stopped is None or totals.spent + worst > self.amount:
                raise BudgetExceeded(
                    f"--max-cost {self.amount:g}: the next call could cost up to {worst:.4f}, "
                    f"with {totals.spent:.4f} spent and {totals.reserved:.4f} reserved for calls in "
                    f"flight or batches submitted, {self.amount - totals.spent - totals.reserved:.4f} "
                    "left. Every completed record is saved: rerun with a larger --max-cost to go on"
                )
            if stopped():
                raise Aborted()
            time.sleep(RESERVED_POLL)

    def settle(
        self,
        reserved: float,
        model: str,
        prompt_tokens: int | None,
        completion_tokens: int | None,
        cached_tokens: int = 0,
        batched: float = 0.0,
        priced: str = "",
    ) -> None:
        """The call is over: its real cost, its cached share included (its worst case where the reply carried no
        token counts); `batched`: answered in a batch, at the batch price; `priced`: the price class that served
        it (price_class)."""
        cost = (
            reserved
            if prompt_tokens is None
            else call_cost(
                self.prices[model], prompt_tokens, completion_tokens or 0, cached_tokens, batched, priced
            )
        )
        self.ledger.settle(reserved, cost)
