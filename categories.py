"""The six cause-of-action classes of LexPilot (paper, Appendix D, Table 10): the face at the top of the checkout
of lexpilot/benchmark/categories.py, which holds them: the package stands alone."""

from lexpilot.benchmark.categories import (  # noqa: F401
    CAUSE_CLASSES,
    CAUSES,
    CLASS_LABELS,
    FOCAL_TYPES,
    cause_class,
)
