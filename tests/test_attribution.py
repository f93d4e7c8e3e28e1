"""Client names: the rules in order, User-Agent normalisation, the bound, the settings."""

from __future__ import annotations

import random
import string

import pytest
from pydantic import ValidationError

from ollama_tap.attribution import OTHER, UNKNOWN, ClientNames, parse_rule, product_of
from ollama_tap.cli import build_parser, settings_from
from ollama_tap.config import Settings
from tests.support.clock import FakeClock

HEADER = "X-Ollama-Tap-Client"


@pytest.mark.parametrize(
    ("ua", "product"),
    [
        ("ollama-python/0.6.3 (x86_64 linux) Python/3.11.2", "ollama-python"),
        ("ollama-js/0.6.4 (x64 linux Node.js/v20.19.2)", "ollama-js"),
        ("OpenAI/Python 1.54.0", "openai-python"),
        ("AsyncOpenAI/Python 1.54.0", "openai-python"),
        ("OpenAI/JS 4.77.0", "openai-js"),
        ("curl/8.5.0", "curl"),
        ("Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36", "mozilla"),
        ("python-httpx/0.28.1", "python-httpx"),
        ("Python/3.11 aiohttp/3.12.15", "python"),
        ("  ", None),
        ("(comment first)", None),
        ("é-client/1", None),
    ],
)
def test_user_agent_first_product_token(ua: str, product: str | None) -> None:
    assert product_of(ua) == product


def test_rules_apply_in_order_header_then_rules_then_user_agent_then_unknown() -> None:
    names = ClientNames(50, rules=["lab=10.1.0.0/16", "webui=ua:*OpenWebUI*", "v6=fd00::/8"])
    curl = {"User-Agent": "curl/8.5.0"}
    assert names.name_of({"x-ollama-tap-client": "my-app", **curl}, "10.1.2.3") == "my-app"
    assert names.name_of(curl, "10.1.2.3") == "lab"
    assert names.name_of(curl, "::ffff:10.1.9.9") == "lab", "an IPv4-mapped peer is IPv4"
    assert names.name_of({"user-agent": "Mozilla/5.0 OpenWebUI/0.6"}, "192.0.2.1") == "webui"
    assert names.name_of(curl, "fd00::1") == "v6"
    assert names.name_of(curl, "192.0.2.1") == "curl"
    assert names.name_of({}, "192.0.2.1") == UNKNOWN
    assert names.name_of({"User-Agent": "(nothing)"}, "") == UNKNOWN


def test_a_header_that_is_no_name_is_other_never_its_text() -> None:
    names = ClientNames(50)
    for value in ("why is the sky blue?", "<script>", "naïve"):
        assert names.names_of({HEADER: value}, "127.0.0.1") == (OTHER, OTHER)
    assert names.name_of({HEADER: " spaced "}, "127.0.0.1") == "spaced"
    assert names.name_of({HEADER: "a" * 65}, "127.0.0.1") == "a" * 64, "cut, not refused"


def test_names_match_case_insensitively_and_print_as_first_seen() -> None:
    names = ClientNames(50)
    assert names.name_of({HEADER: "MyApp"}, "") == "MyApp"
    assert names.name_of({HEADER: "myapp"}, "") == "MyApp"


def test_a_thousand_random_header_values_take_at_most_the_cap_of_labels() -> None:
    names = ClientNames(50, rules=["lab=10.0.0.0/8"])
    rng = random.Random(20)
    alphabet = string.printable + "éß€\u200b"
    labels, words = set(), set()
    for i in range(1000):
        # Half of them words (each a would-be name), half anything at all.
        letters = string.ascii_letters + string.digits if i % 2 else alphabet
        value = "".join(rng.choice(letters) for _ in range(rng.randint(1, 80)))
        name, label = names.names_of({HEADER: value}, "10.1.1.1")
        labels.add(label)
        assert len(name) <= 64 and name.isprintable() and " " not in name
        if i % 2:
            words.add(name)
            assert name == value[:64], "a word is kept whatever the cap: only labels fold"
    assert len(labels - {OTHER}) == 50
    assert OTHER in labels
    assert len(words) > 400
    assert names.slots.unlisted() == 50
    assert names.name_of({}, "10.1.1.1") == "lab", "a rule's name is never crowded out"


def test_an_idle_slot_is_freed_after_a_day_and_its_listeners_told() -> None:
    clock = FakeClock()
    names = ClientNames(1, clock=clock)
    freed: list[str] = []
    names.on_free(freed.append)
    assert names.names_of({HEADER: "first"}, "") == ("first", "first")
    assert names.names_of({HEADER: "second"}, "") == ("second", OTHER)
    clock.now += 86_400 + 61
    assert names.names_of({HEADER: "second"}, "") == ("second", "second")
    assert freed == ["first"]


@pytest.mark.parametrize(
    "rule", ["lab", "=10.0.0.0/8", "lab=", "lab=ua:", "lab=10.0.0.0/33", "other=ua:*", "a b=ua:x"]
)
def test_a_bad_rule_is_refused_with_the_fix(rule: str) -> None:
    with pytest.raises(ValueError, match=r"NAME=|CIDR|glob"):
        parse_rule(rule)


def test_rules_from_repeated_flags_and_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    args = build_parser().parse_args(
        ["serve", "--client", "lab=10.0.0.0/8", "--client", "webui=ua:*OpenWebUI*"]
    )
    assert settings_from(args).clients == ("lab=10.0.0.0/8", "webui=ua:*OpenWebUI*")
    monkeypatch.setenv("OLLAMA_TAP_CLIENTS", "lab=10.0.0.0/8, webui=ua:*OpenWebUI*")
    assert Settings().clients == ("lab=10.0.0.0/8", "webui=ua:*OpenWebUI*")
    assert Settings().client_label_cap == 50
    assert Settings().client_header == HEADER
    monkeypatch.setenv("OLLAMA_TAP_CLIENTS", "lab=nowhere")
    with pytest.raises(ValidationError, match="neither a CIDR"):
        Settings()
