"""The six cause-of-action classes of LexPilot (paper, Appendix D, Table 10) and the seven types of focal points
(Appendix E.8, Table 18); categories.py at the top of the checkout is their face."""

# Class (Chinese, as in Table 10) -> (English label used in the paper's tables, its 36 causes).
CAUSE_CLASSES = {
    "婚姻家庭、继承纠纷": (
        "Family",
        (
            "离婚纠纷",
            "离婚后财产纠纷",
            "婚约财产纠纷",
            "抚养纠纷",
            "法定继承纠纷",
        ),
    ),
    "物权纠纷": (
        "Real Rights",
        (
            "物权确认纠纷",
            "返还原物纠纷",
            "相邻关系纠纷",
            "侵害集体经济组织成员权益纠纷",
            "土地承包经营权纠纷",
            "排除妨害纠纷",
            "共有纠纷",
            "财产损害赔偿纠纷",
        ),
    ),
    "侵权纠纷": (
        "Torts",
        (
            "名誉权纠纷",
            "提供劳务者受害责任纠纷",
            "机动车交通事故责任纠纷",
            "产品责任纠纷",
        ),
    ),
    "劳动、服务、工程类合同纠纷": (
        "Service Contract",
        (
            "劳动合同纠纷",
            "劳务合同纠纷",
            "委托合同纠纷",
            "服务合同纠纷",
            "承揽合同纠纷",
            "建设工程合同纠纷",
            "运输合同纠纷",
        ),
    ),
    "交易流转、保险与金融类合同纠纷": (
        "Finance Contract",
        (
            "买卖合同纠纷",
            "房屋买卖合同纠纷",
            "租赁合同纠纷",
            "借款合同纠纷",
            "银行卡纠纷",
            "保证合同纠纷",
            "财产保险合同纠纷",
        ),
    ),
    "其他纠纷": (
        "Misc.",
        (
            "确认合同效力纠纷",
            "追偿权纠纷",
            "破产债权确认纠纷",
            "执行异议之诉",
            "不当得利纠纷",
        ),
    ),
}

# The paper's column order in Tables 2, 16 and 17.
CLASS_LABELS = tuple(label for label, _ in CAUSE_CLASSES.values())

_CLASS_OF_CAUSE = {cause: label for label, causes in CAUSE_CLASSES.values() for cause in causes}
CAUSES = tuple(_CLASS_OF_CAUSE)


def cause_class(cause: str) -> str:
    """English class label (e.g. "Family") of a cause of action spelled as in Table 10."""
    try:
        return _CLASS_OF_CAUSE[cause]
    except KeyError:
        raise KeyError(
            f"unknown cause of action {cause!r}: not one of the 36 causes of Appendix D (Table 10)"
        ) from None


# The seven types of focal points of dispute (Appendix E.8, Table 18): Chinese name -> English label.
FOCAL_TYPES = {
    "主体身份类": "Subject Identity",
    "权属界定类": "Rights Allocation",
    "契约效力类": "Contract Validity",
    "客观行为类": "Factual Conduct",
    "数额界定类": "Amount Assessment",
    "归责逻辑类": "Liability Allocation",
    "其他": "Others",
}
