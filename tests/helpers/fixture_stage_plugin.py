"""A pytest plugin for tests/protocols/test_catalog.py: one more stage, declared only in the stage catalog, as a
contributor adding a stage declares it. Loaded with `-p tests.helpers.fixture_stage_plugin`, before collection."""

import dataclasses

from lexpilot.protocols import catalog
from lexpilot.protocols.dcg import DCG_STAGE


def pytest_configure(config):
    stage = dataclasses.replace(DCG_STAGE, name="fixture stage", script="eval_fixture.py")
    catalog.ENTRY_POINTS["eval_fixture"] = (stage,)
    catalog.GRID_STAGES["eval_fixture"] = (stage,)
