"""What the scripted provider answers for the fault tests: providers' refusals, malformed usage, invalid judge
outputs."""

from tests.helpers.stages import judge_kinds

# an OpenAI reasoning model's refusals of a parameter, as it words them
MAX_TOKENS_REFUSED = {
    "status": 400,
    "param": "max_tokens",
    "code": "unsupported_parameter",
    "type": "invalid_request_error",
    "error": "Unsupported parameter: 'max_tokens' is not supported with this model. "
    "Use 'max_completion_tokens' instead.",
}
TEMPERATURE_REFUSED = {
    "status": 400,
    "param": "temperature",
    "code": "unsupported_value",
    "type": "invalid_request_error",
    "error": "Unsupported value: 'temperature' does not support 0.7 with this model. "
    "Only the default (1) value is supported.",
}


# a reply's `usage` that is negative, null, a float, a string or not an object
USAGES = {
    "negative": {"prompt_tokens": -5, "completion_tokens": 3},
    "null counts": {"prompt_tokens": None, "completion_tokens": 7},
    "float": {"prompt_tokens": 1.5, "completion_tokens": 3},
    "string": {"prompt_tokens": "many", "completion_tokens": 3},
    "list": [120, 3],
    "text": "120 tokens",
    # a count no provider bills: it overflowed the prices' floats and failed every case
    "huge": {"prompt_tokens": 10**400, "completion_tokens": 1},
}
PROSE = "我认为这个问题很难说。"


# every judge prompt of the catalog: their outputs are parsed by `CaseCalls.validated`
VALIDATED = judge_kinds()


class FirstAnswerInvalid:
    """The first answer to every validated prompt is prose; the second is the scripted provider's default."""

    def __init__(self):
        self.seen: set = set()
        self.invalid = self.total = 0

    def __call__(self, kind, prompt, body):
        if kind in VALIDATED and prompt not in self.seen:
            self.seen.add(prompt)
            self.invalid += 1
            self.total += 1
            return PROSE
        return None

    def next_stage(self) -> None:
        """A prompt another stage sent too (the LCA stage's, a re-judge's) is answered in prose again."""
        self.seen.clear()
        self.invalid = 0
