"""The shared checks on a platform's JSON: the deep walk, and the text test that skips it."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bridge.payload import scan, surely_fine

LIMIT = 8

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=20,
)


@given(json_values)
def test_the_text_test_never_passes_what_the_walk_refuses(value: object) -> None:
    text = json.dumps(value)  # ASCII: every non-ASCII character, surrogates too, escaped
    if surely_fine(text, LIMIT):
        deepest, broken = scan(json.loads(text))
        assert deepest <= LIMIT and not broken


@pytest.mark.parametrize(
    ("text", "fine"),
    [
        ('{"text": "hello"}', True),
        ('{"a": {"b": [1, 2]}}', True),
        ("[" * (LIMIT + 1) + "]" * (LIMIT + 1), False),
        ('{"text": "\\ud800"}', False),  # a lone surrogate, lower case
        ('{"text": "\\uDFFF"}', False),  # upper case
        ('{"text": "\\ud83d\\ude00"}', False),  # a valid pair: left to the walk to judge
        ('{"text": "\\u00e9"}', True),
    ],
)
def test_the_text_test(text: str, fine: bool) -> None:
    assert surely_fine(text, LIMIT) is fine
    if fine:
        deepest, broken = scan(json.loads(text))
        assert deepest <= LIMIT and not broken
