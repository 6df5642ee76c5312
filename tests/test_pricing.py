"""Price files (lexpilot/pricing.py), as every reader reads them (a stage's --dry-run, quote_grid.py,
show_results.py --usage): a wrong one is refused in one line naming the file and the entry, before any call."""

import json

import pytest

import show_results
from tests.helpers.reports import refused_by

MODELS = ("eval-model", "DeepSeek-V4.1-Flash", "DeepSeek-R1")


def price_file(tmp_path, text: str):
    path = tmp_path / "prices.json"
    path.write_text(text, encoding="utf-8")
    return path


GOOD = '{"prompt": 1, "completion": 4}'
BAD_PRICES = {
    # the last key would win silently (judge cost 0.0016 instead of 0.0162)
    "a price given twice": (
        '{"DeepSeek-R1": {"prompt": 10, "completion": 40, "prompt": 1}}',
        "entry 'DeepSeek-R1' gives 'prompt' twice (JSON keeps only the last)",
    ),
    "a model given twice": (
        '{"DeepSeek-R1": %s, "DeepSeek-R1": {"prompt": 2, "completion": 8}}' % GOOD,
        "model 'DeepSeek-R1' is given twice",
    ),
    # sums overflow to nan
    "a huge price": (
        '{"DeepSeek-R1": {"prompt": 1e308, "completion": 4}}',
        "prompt must be a number from 0 to 10000",
    ),
    "above the bound": (
        '{"DeepSeek-R1": {"prompt": 10001, "completion": 4}}',
        "prompt must be a number from 0 to 10000",
    ),
    # discounts are shares of a price
    "a negative discount": (
        '{"DeepSeek-R1": {"prompt": 1, "completion": 4, "batch_discount": -0.5}}',
        "batch_discount must be a number from 0 to 1",
    ),
    "a discount above 1": (
        '{"DeepSeek-R1": {"prompt": 1, "completion": 4, "cache_discount": 1.5}}',
        "cache_discount must be a number from 0 to 1",
    ),
    "prompt true": (
        '{"DeepSeek-R1": {"prompt": true, "completion": 4}}',
        "prompt must be a number from 0 to 10000",
    ),
    # a misspelt key priced nothing; two ways to give one price left a guess
    "a misspelt key": (
        '{"DeepSeek-R1": {"prompt": 1, "completion": 4, "cached_promt": 0.5}}',
        "'cached_promt' is not a price key",
    ),
    "a discount and a price": (
        '{"DeepSeek-R1": {"prompt": 1, "completion": 4, "batch_discount": 0.5, "batch_prompt": 0.4}}',
        "give batch_prompt or batch_discount, not both",
    ),
}


@pytest.mark.parametrize("name", BAD_PRICES)
@pytest.mark.parametrize("reader", ["--dry-run", "quote_grid.py", "--usage"])
def test_a_wrong_price_file_is_refused_in_one_line_by_every_reader(
    harness, provider, tmp_path, capsys, name, reader
):
    text, message = BAD_PRICES[name]
    path = price_file(tmp_path, text)
    said = refused_by(reader, harness, path, capsys)
    assert str(path) in said and message in said and "nan" not in said
    assert not provider.requests or reader == "--usage"


def test_a_good_price_file_still_reads(harness, tmp_path, capsys):
    path = price_file(
        tmp_path,
        json.dumps(
            {m: {"prompt": 1, "completion": 4, "batch_discount": 0.5, "cache_discount": 0} for m in MODELS}
        ),
    )
    assert harness.run("gold", "--limit", "1", "--dry-run", "--prices", str(path)) == 0


def test_the_price_file_message_has_no_stray_brace(tmp_path, capsys):

    path = tmp_path / "p.json"
    path.write_text('{"m": {"prompt": "x"}}', encoding="utf-8")
    assert show_results.main(["--prices", str(path)]) == 2
    err = capsys.readouterr().err
    assert '{"prompt": number, "completion": number} (price' in err and "}}" not in err


def test_a_served_tier_or_model_named_like_a_count_is_no_price_class():
    """A reply's served tier is untrusted text: one named "calls" is counted as "tier:calls", and must not take calls
    out of the standard price's."""
    from lexpilot.pricing import Price, usage_cost

    price = Price(2, 8, 1, 4)
    used = {
        "calls": 2,
        "batched_calls": 1,
        "prompt_tokens": 1_000_000,
        "completion_tokens": 0,
        "tier:calls": 2,
    }
    # a million prompt tokens, half the calls at the standard 2 per million and half batched at 1
    assert usage_cost(price, used) == 1.5
