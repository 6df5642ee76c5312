"""The scripted provider lists batches as OpenAI does: the newest first, a page of `limit` at a time, `after` the
last one seen, `has_more` while others follow; so the SDK's pages walk them all once, and a stage's check of the
batch endpoint (`limit=1`) reads one batch, not a test's whole history."""

import pytest

from lexpilot.scripted.batches import listed_page
from lexpilot.scripted.provider import ScriptedProvider

LINE = b'{"custom_id": "a", "method": "POST", "url": "/v1/chat/completions", "body": {"model": "m", '
LINE += b'"messages": [{"role": "user", "content": "hi"}]}}\n'


def test_a_page_is_the_newest_first_after_the_cursor_and_says_whether_more_follow():
    batches = [{"id": f"b{n}"} for n in range(1, 6)]  # made in this order: b5 is the newest
    assert listed_page(batches, {"limit": ["2"]}) == ([{"id": "b5"}, {"id": "b4"}], True)
    assert listed_page(batches, {"limit": ["2"], "after": ["b4"]}) == ([{"id": "b3"}, {"id": "b2"}], True)
    assert listed_page(batches, {"limit": ["2"], "after": ["b2"]}) == ([{"id": "b1"}], False)
    assert listed_page(batches, {}) == (batches[::-1], False)  # 20 unless asked


@pytest.mark.slow  # the SDK's first import, in a quick run
def test_the_sdk_lists_one_batch_for_limit_1_and_every_batch_through_its_pages():
    with ScriptedProvider() as provider:
        client = provider.in_memory_clients()["judge"]
        made = []
        for _ in range(3):
            uploaded = client.files.create(file=("b.jsonl", LINE), purpose="batch")
            made.append(
                client.batches.create(
                    input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
                ).id
            )
        first = client.batches.list(limit=1)
        assert [b.id for b in first.data] == [made[-1]] and first.has_more
        assert [b.id for b in client.batches.list(limit=2)] == made[::-1]  # the pages walked: each batch once
