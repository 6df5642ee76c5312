"""The flex service tier, call by call. OpenAI's flex processing "provides lower costs for Responses or Chat
Completions requests in exchange for slower response times and occasional resource unavailability"; its tokens "are
priced at Batch API rates". A role asks for it with --service-tier flex (--user-service-tier, --judge-service-tier);
a "resource unavailable" answer is waited out, is not charged and is not a rate limit (the endpoint's AIMD window
keeps its size); --flex-fallback N sends a call at the standard tier after N of them; a model without the tier stops
the role with one line; each reply is billed at the tier it says served it."""

import dataclasses
import io
import json
import threading

import pytest

from lexpilot.errors import STOPPED, CaseFailed, FatalError
from lexpilot.models.calls import ModelCaller
from lexpilot.models.quirks import Refusal, provider_error, refusal_of
from lexpilot.models.usage import FLEX_FALLBACK_CALLS, Usage
from lexpilot.pricing import Price, usage_cost
from lexpilot.running.stage import Progress
from lexpilot.settings import Spending
from tests.helpers.calls import make_caller

# per million tokens: standard 2000 / 8000, batch half of it, flex given apart (so a flex bill is told from a batch one)
PRICE = Price(2000, 8000, 1000, 4000, flex_prompt=700, flex_completion=2800)


def flex_caller(provider, fallback: int | None = None, max_cost: float | None = None) -> ModelCaller:
    """A caller whose judge asks for the flex tier (the evaluated model asks for none)."""
    base = make_caller(provider, judge_service_tier="flex")
    settings = dataclasses.replace(
        base.settings,
        transport=dataclasses.replace(base.settings.transport, flex_fallback=fallback),
        spending=Spending({role.model: PRICE for role in base.settings.roles.values()}, max_cost),
    )
    return ModelCaller(settings, Progress("t", 1, stream=open("/dev/null", "w")), threading.Event())


def test_a_flex_call_asks_for_the_tier_and_is_billed_at_the_flex_price(provider):
    caller, usage = flex_caller(provider), Usage()
    caller.chat("judge", "请判断", usage)
    caller.chat("eval", "请回答", usage)
    tiers = [(r["model"], r.get("service_tier")) for r in provider.requests]
    assert tiers == [("DeepSeek-R1", "flex"), ("eval-m", None)]  # only the role that asks for it
    judge = usage.by_role["judge"]
    assert judge["tier:flex"] == 1 and judge["served:DeepSeek-R1"] == 1
    # the scripted provider counts a character as a token: 3 prompt tokens, and its canned reply's length
    prompt, completion = judge["prompt_tokens"], judge["completion_tokens"]
    assert prompt == 3 and judge["flex:prompt_tokens"] == 3 and judge["flex:completion_tokens"] == completion
    assert usage_cost(PRICE, judge) == pytest.approx((3 * 700 + completion * 2800) / 1e6)
    standard = usage.by_role["eval"]
    assert usage_cost(PRICE, standard) == pytest.approx(
        (standard["prompt_tokens"] * 2000 + standard["completion_tokens"] * 8000) / 1e6
    )


def test_unavailable_answers_are_waited_out_uncharged_and_leave_the_window_whole(provider):
    provider.flex_unavailable = 0.3  # three flex requests in ten refused with OpenAI's 429
    caller, usage = flex_caller(provider, max_cost=1000), Usage()
    for i in range(20):
        caller.chat("judge", f"问题{i}", usage)
    assert provider.statuses[429] >= 8  # 30 % of the flex requests, the retries included
    limiter = caller.limiters["judge"]
    # a rate limit would have halved the window (16 -> 8), and twenty replies cannot grow it back
    assert limiter.rate_limited == 0 and limiter.limit == limiter.max_limit
    judge = usage.by_role["judge"]
    assert judge["calls"] == 20 and judge["tier:flex"] == 20
    # the budget settles what the replies cost, and nothing for the refusals (OpenAI does not charge them)
    assert caller.budget is not None
    assert caller.budget.spent == pytest.approx(usage_cost(PRICE, judge)) and caller.budget.reserved == 0


def test_a_rate_limit_429_is_not_read_as_the_flex_tier_unavailable():
    rate_limit = provider_error(
        429, {"error": {"message": "Rate limit reached for requests", "code": "rate_limit_exceeded"}}
    )
    unavailable = provider_error(
        429, {"error": {"message": "Resource unavailable.", "code": "resource_unavailable"}}
    )
    assert refusal_of(rate_limit) is None and refusal_of(unavailable) is Refusal.UNAVAILABLE
    # the same wording with another status is not the flex tier's
    assert refusal_of(provider_error(503, {"error": {"message": "Resource unavailable."}})) is None


def test_after_n_unavailable_answers_a_call_goes_at_the_standard_tier_and_is_billed_there(provider):
    provider.flex_unavailable = 1.0  # the flex tier has no room at all
    caller, usage = flex_caller(provider, fallback=2), Usage()
    caller.chat("judge", "请判断", usage)
    # two refused at flex, then the standard tier ("default") answers, and the reply says so
    assert [r.get("service_tier") for r in provider.requests] == ["default"]
    assert provider.statuses[429] == 2
    judge = usage.by_role["judge"]
    assert judge[FLEX_FALLBACK_CALLS] == 1 and judge["tier:default"] == 1 and "flex:calls" not in judge
    assert usage_cost(PRICE, judge) == pytest.approx(
        (judge["prompt_tokens"] * 2000 + judge["completion_tokens"] * 8000) / 1e6
    )


def test_without_a_fallback_a_call_the_flex_tier_never_takes_fails_its_case_saying_what_to_do(provider):
    provider.flex_unavailable = 1.0
    with pytest.raises(CaseFailed) as failed:
        flex_caller(provider).chat("judge", "请判断", Usage())
    said = str(failed.value)
    assert "unavailable at the flex tier" in said and "--flex-fallback N" in said and "\n" not in said
    assert not provider.requests  # nothing was answered, so nothing was paid


def test_a_model_without_the_flex_tier_stops_the_role_with_one_line_naming_the_option(provider):
    provider.flex_refused = {"DeepSeek-R1"}
    with pytest.raises(FatalError) as stopped:
        flex_caller(provider).chat("judge", "请判断", Usage())
    said = str(stopped.value)
    assert "'DeepSeek-R1'" in said and "service tier 'flex'" in said and "drop --judge-service-tier" in said
    assert "\n" not in said


def test_with_batch_the_roles_left_synchronous_ask_for_the_flex_tier_and_batched_requests_do_not(harness):
    """A batch's requests are billed at the batch price; only a role asked directly takes --service-tier."""
    assert harness.run("DCG", "--batch", "--batch-roles", "eval,user", "--judge-service-tier", "flex") == 0
    judge = [r for r in harness.provider.requests if r["model"] == "DeepSeek-R1"]
    assert judge and all(r["service_tier"] == "flex" for r in judge)
    lines = [json.loads(line) for line in b"\n".join(harness.provider.files.values()).splitlines() if line]
    batched = [line["body"] for line in lines if "method" in line]  # the input files' requests
    assert batched and not any("service_tier" in body for body in batched)
    assert {b["model"] for b in batched} == {"eval-model", "DeepSeek-V4.1-Flash"}
    manifest = json.loads(next(harness.root.glob("runs/r1/*/manifest.json")).read_text(encoding="utf-8"))
    assert manifest["service_tiers"] == {"judge": ["flex"]}
    # a later invocation at the standard tier is noted beside it (not a compared setting: the model is the same)
    assert harness.run("direct") == 0
    manifest = json.loads(next(harness.root.glob("runs/r1/*/manifest.json")).read_text(encoding="utf-8"))
    assert manifest["service_tiers"] == {"judge": ["flex", "default"]}


def test_a_stage_whose_judge_refuses_the_tier_stops_with_one_line_and_asks_nothing_more(harness, capsys):
    harness.provider.flex_refused = {"DeepSeek-R1"}
    assert harness.run("DCG", "--judge-service-tier", "flex", "--concurrency", "1") == STOPPED
    err = [line for line in capsys.readouterr().err.splitlines() if "stopped" in line]
    assert len(err) == 1 and "drop --judge-service-tier" in err[0] and "Traceback" not in err[0]
    judge = [r for r in harness.provider.requests if r["model"] == "DeepSeek-R1"]
    assert judge == []  # refused before it was answered: no judge call was paid


def test_a_flex_reply_naming_no_tier_and_a_tier_that_cannot_be_priced_are_said_once(provider):
    """An endpoint that ignores service_tier (llama.cpp's server) answers with no tier: billed at the standard price,
    and said once; a reply served at a tier the price file cannot price (OpenAI's priority) is said too."""
    caller = flex_caller(provider)
    caller.progress.stream = said = io.StringIO()
    provider.tier_served = lambda body: {}  # the endpoint ignores the tier
    usage = Usage()
    for i in range(3):
        caller.chat("judge", f"问题{i}", usage)
    assert said.getvalue().count("flex asked, but the replies name no service tier") == 1
    assert "flex:calls" not in usage.by_role["judge"]  # billed at the standard price
    provider.tier_served = lambda body: {"service_tier": "priority"}
    caller.chat("eval", "请回答", Usage())
    assert "served at tier 'priority', which the price file cannot price" in said.getvalue()


def test_only_the_tiers_the_price_file_can_price_are_offered(harness, capsys):
    with pytest.raises(SystemExit) as refused:  # argparse's refusal, in one line (errors.OneLineParser)
        harness.run("DCG", "--judge-service-tier", "priority")
    assert refused.value.code == STOPPED
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "'priority'" in err and "'flex'" in err, err
