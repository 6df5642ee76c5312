"""The benchmark's words, declared once: the court's verdicts, the two histories, the three roles (each with every
name it goes by) and the user conditions, and the labels the judge answers with (the prompts of Appendix F ask for
exactly these strings)."""

from dataclasses import dataclass

VERDICTS = ("支持", "部分支持", "驳回")  # ordinal 0, 1, 2 for QWK
HISTORY_TYPES = ("complete", "underspecified")


@dataclass(frozen=True)
class RoleInfo:
    """One of a run's three roles and every name it goes by, each read from here (issue 55 item 1: the flags, the
    variables, the defaults and the words for the roles were six tables in four files)."""

    name: str  # records, batches, --batch-roles, the manifest's "models": "user"
    display: str  # messages and pages: "User Model"
    option: (
        str  # its command-line options' prefix: --{option}model, --{option}temperature, --{option}max-tokens
    )
    env: str  # its endpoint's variables' prefix: {env}_BASE_URL, {env}_API_KEY (then OPENAI_BASE_URL, ..._API_KEY)
    model_variable: str  # the variable its model id is read from when --{option}model is not given
    default_model: str | None  # without option and variable (None: it must be chosen)
    # the paper's temperature (Appendix E.1); None: the evaluated model's (--temperature) unless its own option's
    temperature: float | None

    def flag(self, setting: str) -> str:
        """Its command-line option for `setting` (model, temperature or max-tokens): "--user-max-tokens"."""
        return f"--{self.option}{setting}"

    def key(self, setting: str) -> str:
        """That option's name in argparse's namespace, which is its name in the manifest's "generation" too:
        "user_max_tokens"."""
        return self.flag(setting)[2:].replace("-", "_")


# in the order of every listing: the evaluated model first, its options every other role's defaults
ROLE_TABLE = (
    # name, display, option, env, model_variable, default_model, temperature
    RoleInfo("eval", "evaluated model", "", "LEXPILOT_EVAL", "LEXPILOT_MODEL", None, 0.7),
    RoleInfo(
        "user", "User Model", "user-", "LEXPILOT_USER", "LEXPILOT_USER_MODEL", "DeepSeek-V4.1-Flash", None
    ),
    RoleInfo("judge", "judge", "judge-", "LEXPILOT_JUDGE", "LEXPILOT_JUDGE_MODEL", "DeepSeek-R1", 0.1),
)
ROLE = {r.name: r for r in ROLE_TABLE}
ROLES = tuple(ROLE)  # ("eval", "user", "judge")
USER_CONDITIONS = ("standard", "delayed", "self-correction")  # Appendix E.5
# the entry points that run with a non-ideal user (--user-condition): the stages declaring `user_condition` (a test
# checks this against the catalog; a stage reads it here, so that its code hash holds no other stage's protocol)
CONDITION_SCRIPTS = ("LexAwN_gen.py", "eval_LJP_interaction.py", "audit_simulator.py")

# LCA (Table 23): 策略一, the response treats the history as complete (a prediction); 策略二, it asks
LCA_LABELS = PREDICTS, ASKS = ("策略一", "策略二")
# Every yes/no judgment (DCG, Table 24; the relevance check, the simulator audit, the probe study's experts)
DCG_LABELS = YES, NO = ("是", "否")
# The plain consultation's response types (Appendix C.2), in C.2's order
RESPONSE_TYPES = {
    "缺失识别": "deficiency_recognition",
    "条件性一般建议": "conditional_advice",
    "无条件一般建议": "unconditional_advice",
    "过早预测": "premature_prediction",
}
BEHAVIOURS = ("targeted", "off_target")  # Table 4's two dialogue conditions
