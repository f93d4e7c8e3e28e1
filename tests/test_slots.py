"""The generic bounded-name registry: slots by listing or proof, freed after a day idle."""

from __future__ import annotations

from ollama_tap.slots import IDLE_RELEASE, LabelSlots


class Clock:
    def __init__(self) -> None:
        self.now = 5000.0

    def __call__(self) -> float:
        return self.now


def slots_with(cap: int) -> tuple[LabelSlots, Clock, list[str]]:
    clock, freed = Clock(), []
    slots = LabelSlots(cap, clock=clock)
    slots.on_free(freed.append)
    return slots, clock, freed


def test_unproven_names_hold_nothing_and_proofs_fill_the_cap() -> None:
    slots, _, _ = slots_with(cap=2)
    assert slots.get("alice") is None
    assert slots.prove("alice", "Alice") == "Alice"
    assert slots.prove("bob", "bob") == "bob"
    assert slots.prove("carol", "carol") is None, "every unlisted slot is taken"
    assert slots.get("carol") is None
    assert slots.prove("alice", "ALICE") == "Alice", "a slot keeps its first spelling"
    assert slots.unlisted() == 2


def test_listed_names_are_not_capped() -> None:
    slots, _, _ = slots_with(cap=1)
    slots.list_names("rules", {f"n{i}": f"N{i}" for i in range(50)})
    assert all(slots.get(f"n{i}") == f"N{i}" for i in range(50))
    assert slots.prove("n7", "n7") == "N7", "the listed spelling wins"
    assert slots.prove("extra", "extra") == "extra"
    assert slots.unlisted() == 1


def test_the_listed_set_is_the_union_of_sources() -> None:
    slots, _, _ = slots_with(cap=1)
    slots.list_names("tags", {"a": "a"})
    slots.list_names("ps", {"b": "b"})
    assert slots.is_listed("a") and slots.is_listed("b")
    slots.list_names("ps", {})
    assert slots.is_listed("a") and not slots.is_listed("b")
    assert slots.get("b") == "b", "no longer listed, still holding its slot"


def test_an_unlisted_slot_is_freed_after_a_day_without_proof() -> None:
    slots, clock, freed = slots_with(cap=1)
    slots.prove("used", "used")
    clock.now += IDLE_RELEASE - 10
    assert slots.prove("used", "used") == "used", "a proof renews the day"
    clock.now += IDLE_RELEASE - 10
    slots.sweep()
    assert freed == []
    clock.now += 10
    slots.sweep()
    assert freed == ["used"]
    assert slots.get("used") is None
    assert slots.prove("next", "next") == "next", "the freed slot is taken again"
    assert slots.prove("used", "used") is None


def test_the_day_of_a_name_that_left_the_list_starts_when_it_left() -> None:
    slots, clock, freed = slots_with(cap=5)
    slots.list_names("tags", {"m": "M"})
    clock.now += 10 * IDLE_RELEASE
    slots.list_names("tags", {})
    assert freed == [], "listed for ten days, served nothing: still kept a day from now"
    clock.now += IDLE_RELEASE
    slots.list_names("tags", {})
    assert freed == ["M"]


def test_a_proven_spelling_replaced_by_the_listed_one_is_freed() -> None:
    slots, _, freed = slots_with(cap=5)
    slots.prove("m", "m-as-typed")
    slots.list_names("tags", {"m": "m-as-listed"})
    assert freed == ["m-as-typed"]
    assert slots.get("m") == "m-as-listed"
    slots.prove("same", "same")
    slots.list_names("tags", {"m": "m-as-listed", "same": "same"})
    assert freed == ["m-as-typed"], "a spelling that stays is not freed"
