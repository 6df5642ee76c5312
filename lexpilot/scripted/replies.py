"""The scripted provider's canned replies: a deterministic reply per request kind that exercises every path of every
stage, the per-model variant (`--models-differ`), and a provider's prefix cache as its usage reports it."""

from __future__ import annotations

import json
import os
import threading

from lexpilot.scripted.kinds import between, stable

ASK, PREDICT = "【追问】", "【预测】"

PLAIN_STYLES = (
    ("缺失识别", "您提供的信息还不足以判断，请补充借款的约定。"),
    ("条件性一般建议", "情形一：若有借条……情形二：若没有借条……"),
    ("无条件一般建议", "建议您保留证据，先协商，协商不成再起诉。"),
    ("过早预测", "您的诉请会得到支持。"),
)


def fault_record(prompt: str) -> str:
    """The structured record a self-correcting user's faulty reply ends with, when its prompt asks for one:
    an incomplete answer about the first key detail."""
    if "<故障记录>{" not in prompt:
        return ""
    detail = between(prompt, "案件客观事实").split("\n")[0].strip()
    return "\n<故障记录>" + json.dumps({"类型": "不完整", "涉及": detail}, ensure_ascii=False) + "</故障记录>"


def default_reply(kind: str, prompt: str) -> str:
    """Deterministic replies that exercise every path: some LexAwN replies ask, some predict."""
    if kind == "lexawn":
        history = between(prompt, "对话历史")
        first = history.split("\n", 1)[0]
        # Ask until the history holds a case-dependent number of assistant turns (0 to 4).
        patience = stable(first) % 5
        return (
            PREDICT + "结合现有事实，诉请预测：支持。"
            if history.count("Assistant:") >= patience
            else ASK + "请问还需要核实哪一点事实？"
        )
    if kind == "force_ask":
        return ASK + "请问借款是否有转账记录？"
    if kind == "force_judge":
        return PREDICT + "法律分析……各项诉请预测：支持。"
    if kind == "user":
        return "这个我记得，具体情况是这样的。" + fault_record(prompt)
    if kind in ("targeted", "off_target"):
        return {"targeted": "【定向】请问还有哪些事实？", "off_target": "【无关】请问您是怎么找到我们的？"}[
            kind
        ]
    if kind == "behaviour_judge":  # targeted dialogues recover every fact, off-target ones none
        n = len(between(prompt, "案件关键事实").split("\n"))
        status = "recovered" if "【定向】" in between(prompt, "对话") else "absent"
        last = between(prompt, "对话").count("次发言）")  # a recovered fact cites the last user turn
        return json.dumps(
            {
                "facts": [
                    {"id": i, "status": status, "turns": [last] if status == "recovered" else []}
                    for i in range(1, n + 1)
                ],
                "unsupported_assertion": False,
                "question_reveals_answer": False,
                "beyond_scope": False,
            }
        )
    if kind == "audit_judge":  # a clean reply
        return json.dumps({"超范围披露": [], "不实陈述": "否", "回答了问题": "是"}, ensure_ascii=False)
    if kind == "focal_judge":
        return "归责逻辑类"
    if kind == "plain":  # one of the four C.2 response types, by the consultation
        return PLAIN_STYLES[stable(prompt) % 4][1]
    if kind == "type_judge":
        reply = between(prompt, "待评估回复")
        return next((name for name, text in PLAIN_STYLES if text == reply), "过早预测")
    if kind == "lca_judge":
        return "策略一" if PREDICT in between(prompt, "待评估回复") else "策略二"
    if kind == "dcg_judge":
        return (
            "是" if stable(between(prompt, "AI提问内容") + between(prompt, "裁判文书争议焦点")) % 2 else "否"
        )
    if kind == "ljp_judge":
        claims = between(prompt, "正式诉请").split("\n")
        labels = ["支持", "部分支持", "驳回"]
        return json.dumps({"results": [labels[stable(c) % 3] for c in claims]}, ensure_ascii=False)
    return "?"


def models_differ(kind: str, prompt: str, body: dict) -> str | None:
    """A script under which evaluated models answer differently (`--models-differ`), so that the comparison page,
    the rankings and the case list have differences to show: each model asks for a number of turns of its own
    before it predicts, tags its replies with its id (so the DCG judge, which hashes the question, judges them
    apart), and the LJP judge reads each model's reply as verdicts of its own. Every other request is as by default."""
    model = body.get("model", "")
    if kind == "lexawn":
        history = between(prompt, "对话历史")
        patience = stable(history.split("\n", 1)[0] + model) % 5
        return (
            PREDICT + f"结合现有事实（{model}），诉请预测：支持。"
            if history.count("Assistant:") >= patience
            else ASK + f"请问还需要核实哪一点事实？（{model}）"
        )
    if kind in ("force_ask", "force_judge"):
        return default_reply(kind, prompt) + f"（{model}）"
    if kind == "ljp_judge":
        reply, labels = between(prompt, "待提取回复"), ["支持", "部分支持", "驳回"]
        claims = between(prompt, "正式诉请").split("\n")
        return json.dumps({"results": [labels[stable(c + reply) % 3] for c in claims]}, ensure_ascii=False)
    return None


class PrefixCache:
    """A provider's automatic prefix cache, as OpenAI documents it: a prompt of at least `minimum` tokens is served
    from the cache for the longest prefix it shares with an earlier prompt, counted in steps of `step` tokens past
    the minimum (one token a character, as this provider counts them). Entries never expire here: the best case.
    Use as `provider.cache = PrefixCache()`; it reports OpenAI's usage field."""

    def __init__(self, minimum: int = 1024, step: int = 128):
        self.minimum, self.step, self.lock = minimum, step, threading.Lock()
        self.seen: list[str] = []  # every prompt so far

    def __call__(self, prompt: str) -> dict:
        with self.lock:
            shared = max((len(os.path.commonprefix([earlier, prompt])) for earlier in self.seen), default=0)
            self.seen.append(prompt)
        cached = (
            0 if shared < self.minimum else self.minimum + (shared - self.minimum) // self.step * self.step
        )
        return {"prompt_tokens_details": {"cached_tokens": cached}}
