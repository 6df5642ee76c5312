"""The benchmark's words, declared once: the court's verdicts, the two histories, the three roles and the user
conditions, and the labels the judge answers with (the prompts of Appendix F ask for exactly these strings)."""

VERDICTS = ("支持", "部分支持", "驳回")  # ordinal 0, 1, 2 for QWK
HISTORY_TYPES = ("complete", "underspecified")
ROLES = ("eval", "user", "judge")
ROLE_NAMES = {"eval": "evaluated model", "user": "User Model", "judge": "judge"}
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
