"""How the suite shares out among pytest-xdist's workers (`make unit`'s `-n`; a plugin that
tests/conftest.py loads).

Each test module (or class) goes to one worker whole, as xdist's `--dist loadscope` sends
them: a module-scoped fixture starts its server or its runs (promtool over every rule file)
once, not on every worker that draws one of its tests. The real-inference tiers, which run a
model on the CPU (llama-server, the real Ollama), are one unit of work: one worker runs them in
order, so each session fixture starts one server, no two inferences share the two cores, and
their timings (TTFT against the client's stopwatch, a load's duration) are the engine's alone.
That unit is the longest of the suite, so it comes first: xdist hands out work in collection
order, and a unit handed out last would run alone at the end.

The tiers are told by their path, in the scheduler itself, not by an `xdist_group` mark:
xdist's `--dist loadgroup` carries a mark to the scheduler by rewriting the test's node id,
which pytest 9.2 no longer lets it do, so the marks go unheard and the tests are spread
(pytest-dev/pytest-xdist#1386). This scheduler replaces xdist's default (`-n` alone, `--dist
load`); any other `--dist` gets xdist's own.
"""

from __future__ import annotations

import contextlib
from typing import Final

import pytest
from xdist.remote import Producer
from xdist.scheduler import LoadScopeScheduling

from tests.deploy import stack

REAL_INFERENCE: Final = ("tests/engine/", "tests/ollama_real/")
"""The real-inference tiers, as the start of their tests' node ids (relative to the root)."""

UNIT: Final = "real-inference"


def real_inference(nodeid: str) -> bool:
    return nodeid.startswith(REAL_INFERENCE)


class TierScheduling(LoadScopeScheduling):
    """xdist's scope scheduling, the real-inference tiers one scope."""

    def _split_scope(self, nodeid: str) -> str:
        return UNIT if real_inference(nodeid) else super()._split_scope(nodeid)


@pytest.hookimpl(optionalhook=True)  # a hook of xdist's, absent under `-p no:xdist`
def pytest_xdist_make_scheduler(config: pytest.Config, log: Producer) -> TierScheduling | None:
    return TierScheduling(config, log) if config.getvalue("dist") == "load" else None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The real-inference tiers first (above); each part keeps its order (a stable sort)."""
    items.sort(key=lambda item: not real_inference(item.nodeid))


BACKGROUND: Final = "tests/deploy/test_rules.py"
"""The module whose promtool runs (stack.rule_runs) a serial suite starts early."""
_STARTED: Final = pytest.StashKey[bool]()


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Serially, the promtool runs start with the first test past the real-inference tiers,
    on one background thread: the suite's one thread leaves a core idle, and those runs are
    minutes of CPU that test_rules.py would otherwise wait through at the end. Not during
    the real tiers (their timings are the engine's alone), not in xdist's workers (each
    collects every test, and only one runs test_rules.py: its fixture starts them there)."""
    config = item.config
    if real_inference(item.nodeid) or hasattr(config, "workerinput"):
        return
    if config.stash.get(_STARTED, False):
        return
    config.stash[_STARTED] = True
    if any(i.nodeid.startswith(BACKGROUND) for i in item.session.items):
        # Without promtool, test_rules.py's fixture asks again and skips, saying why.
        with contextlib.suppress(pytest.skip.Exception):
            stack.rule_runs(workers=1)
