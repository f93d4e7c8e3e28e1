"""The JSON guards every payload read goes through, on the values where a loose check errs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from ollama_tap.ollama.payloads import (
    COUNT_MAX,
    bool_or_none,
    count_or_none,
    count_or_zero,
    dict_or_none,
    json_object,
    nonempty_str,
    str_or_empty,
)

NAN, INF = float("nan"), float("inf")

CASES: list[tuple[Callable[[Any], Any], Any, Any]] = [
    (nonempty_str, "a", "a"),
    (nonempty_str, "", None),
    (nonempty_str, None, None),
    (nonempty_str, 1, None),
    (nonempty_str, ["a"], None),
    (str_or_empty, "a", "a"),
    (str_or_empty, "", ""),
    (str_or_empty, None, ""),
    (str_or_empty, 1, ""),
    (count_or_none, 0, 0),
    (count_or_none, 7, 7),
    (count_or_none, COUNT_MAX, COUNT_MAX),
    (count_or_none, 2**63, None),
    (count_or_none, -1, None),
    (count_or_none, True, None),
    (count_or_none, False, None),
    (count_or_none, 3.0, 3),
    (count_or_none, 3.7, 3),
    (count_or_none, -0.5, None),
    (count_or_none, 1e30, None),
    (count_or_none, NAN, None),
    (count_or_none, INF, None),
    (count_or_none, "7", None),
    (count_or_none, None, None),
    (count_or_zero, 7, 7),
    (count_or_zero, 2**63, 0),
    (count_or_zero, -1, 0),
    (count_or_zero, True, 0),
    (count_or_zero, 3.7, 3),
    (count_or_zero, NAN, 0),
    (count_or_zero, None, 0),
    (bool_or_none, True, True),
    (bool_or_none, False, False),
    (bool_or_none, 0, None),
    (bool_or_none, "true", None),
    (dict_or_none, {"a": 1}, {"a": 1}),
    (dict_or_none, {}, {}),
    (dict_or_none, [], None),
    (dict_or_none, None, None),
    (json_object, b'{"a":1}', {"a": 1}),
    (json_object, bytearray(b"{}"), {}),
    (json_object, b"", None),
    (json_object, b"[1]", None),
    (json_object, b'"a"', None),
    (json_object, b"{", None),
]


@pytest.mark.parametrize(
    ("guard", "value", "expected"),
    CASES,
    ids=[f"{guard.__name__}({value!r})" for guard, value, _ in CASES],
)
def test_a_guard_returns_its_type_or_its_stated_default(
    guard: Callable[[Any], Any], value: Any, expected: Any
) -> None:
    got = guard(value)
    assert got == expected
    assert type(got) is type(expected)  # True == 1 and 3.0 == 3: the type must match too
