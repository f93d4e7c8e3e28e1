"""The router: which box an exchange goes to, decided once before it is sent, and why.

Each box is placed in the first tier it qualifies for, and the first box of the best tier
wins (docs/boxes.md, "Routing"):

(a) RESIDENT: the model is resident there and this request would not reload it (the load
    tracker's prediction, rule L2) — fewest of the tap's exchanges on the box first;
(b) LOADABLE: the box lists the model and loading it there evicts no model with requests
    in flight — the cheapest expected load first (that box's last load of the model);
(c) LISTED: the box lists the model;
then any box (no box lists the model, or the request names none), fewest exchanges first.
A box whose last poll failed is skipped (tried last, in order, if every box is down). Ties
go to the box given first in the configuration: the same state routes the same way.
With `--affinity client`, a client stays on the box it used last while that box is in (a).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Final

from ollama_tap.boxes.box import UPSTREAM_HEADER, Box
from ollama_tap.exchange import Exchange, Outcome
from ollama_tap.facts import Route, RouteTier
from ollama_tap.loads.state import Outlook
from ollama_tap.loads.tracker import Known
from ollama_tap.ollama.names import model_key

AFFINITY_CLIENTS: Final = 4096
"""Clients whose last box `--affinity client` remembers (least recently routed go first)."""
_TIER_ORDER: Final = (RouteTier.RESIDENT, RouteTier.LOADABLE, RouteTier.LISTED, RouteTier.UNLISTED)


Ranked = tuple[int, float, int, int, int, Box, "Outlook | None"]
"""(tier, expected load seconds, models resident, exchanges on it, place, box, outlook):
sorted on the first five."""


def load_cost(box: Box, model: str) -> tuple[float, int]:
    """What a load of `model` on the box is expected to cost: the seconds its last load
    there took (unknown: last), then the models resident on the box per its last /api/ps and
    the replies since (the fewest, the least likely to evict one)."""
    last = box.loads.last_load(model)
    return last if last is not None else math.inf, len(box.poller.loaded_keys() | box.served.keys())


class Plan:
    """The boxes an exchange may go to, best first, and the route it takes to the first."""

    __slots__ = ("boxes", "route")

    def __init__(self, boxes: list[Box], route: Route) -> None:
        self.boxes = boxes
        self.route = route


class Router:
    """Ranks the boxes for each exchange from what their pollers and load trackers know."""

    def __init__(self, boxes: Sequence[Box], *, affinity: bool = False) -> None:
        self.boxes = list(boxes)
        self.by_name = {box.name: box for box in self.boxes}
        self.affinity = affinity
        self._last: OrderedDict[str, str] = OrderedDict()
        self.client_of: Callable[[Exchange], str] = lambda ex: ex.client_name or ex.client
        """Who sent an exchange, for --affinity: routing comes before the request hook that
        names the client, so the app wires the naming rules in (ClientNames.name_of)."""
        self._going: dict[str, tuple[Box, str]] = {}
        """Each exchange on a box, with the model key it is counted under."""

    def plan(self, ex: Exchange) -> Plan:
        """The ranked boxes for `ex` and the route to the first (nothing is noted: the
        caller counts the exchange on the box it sends to, `going`)."""
        model = ex.model
        key = model_key(model) if model else ""
        ranked: list[Ranked] = []
        notes: list[str] = []
        known: Known = {}
        for box in self.boxes:
            if box.down:
                notes.append(f"{box.name} is down")
                ranked.append((5, 0.0, 0, 0, box.index, box, None))
                continue
            tier, seen = self._tier(box, ex, model, key, known)
            if seen is not None and seen.reloads:
                changes = ", ".join(c.text for c in seen.changes if c.certain)
                notes.append(f"{box.name} would have reloaded for {changes}")
            ranked.append((tier, 0.0, 0, box.in_flight, box.index, box, seen))
        if model and min(r[0] for r in ranked) == 1:
            # Only when (b) decides: the expected load and how full each box is.
            ranked = [(1, *load_cost(r[5], model), *r[3:]) if r[0] == 1 else r for r in ranked]
        ranked.sort(key=lambda r: r[:5])
        first = ranked[0]
        if self.affinity and first[0] == 0:
            first = self._kept(ex, ranked) or first
        box, tier = first[5], first[0]
        reason = self._reason(box, tier, model, first[1])
        if box.name != ranked[0][5].name:
            ranked.remove(first)
            ranked.insert(0, first)
        notes = [n for n in notes if not n.startswith(box.name + " ")]
        text = "; ".join([reason, *notes])
        kind = _TIER_ORDER[tier] if tier < len(_TIER_ORDER) else RouteTier.UNLISTED
        return Plan([r[5] for r in ranked], Route(box.name, kind, text))

    def _tier(
        self, box: Box, ex: Exchange, model: str | None, key: str, known: Known
    ) -> tuple[int, Outlook | None]:
        """The tier of one box that is up, and the tracker's outlook there. The outlook (the
        reload prediction) is asked only where the model is resident: the router's cost
        grows with the boxes that hold the model, not with every box."""
        if not model or not box.poller.has(key):
            return 3, None
        seen = None
        if box.poller.resident(key) or key in box.served:
            seen = box.loads.outlook(ex, known)
            if seen is None:  # a route that loads nothing (/api/show): any box with it
                return 2, None
            if seen.resident and not seen.reloads:
                return 0, seen
            if not seen.resident and box.served.get(key) == seen.opts:
                return 0, seen  # served here since the last read, with these options
        # Busy: the tap's exchanges on the box now (a load there may evict their model, or
        # reload the very runner they use); the tap does not know the box's free memory.
        mine = box.flight.get(key, 0)
        if box.in_flight == mine and not (seen is not None and seen.resident and mine):
            return 1, seen
        return 2, seen

    def _kept(self, ex: Exchange, ranked: list[Ranked]) -> Ranked | None:
        """The client's last box, when it is in (a) too."""
        name = self._last.get(self.client_of(ex))
        return next((r for r in ranked if r[0] == 0 and r[5].name == name), None)

    def _reason(self, box: Box, tier: int, model: str | None, cost: float) -> str:
        name = box.name
        if tier == 0:
            ctx = box.poller.context_length(model)
            with_ctx = f" with num_ctx {ctx}" if ctx else ""
            return f"{model} resident on {name}{with_ctx}"
        if tier == 1:
            last = f", last load {cost:.1f} s" if math.isfinite(cost) else ""
            return (
                f"{model} not resident without a reload; {name} can load it without "
                f"evicting a busy model, with fewest models resident{last}"
            )
        if tier == 2:
            return f"{model} listed on {name}; every box that lists it is busy"
        if tier == 3:
            what = f"no box up lists {model}" if model else "the request names no model"
            return f"{what}; {name} has the fewest exchanges"
        return f"every box is down; trying {name} first"

    def going(self, ex: Exchange, box: Box) -> None:
        """`ex` is sent to `box`: counted there, under its model as known now, until `gone`."""
        ex.box = box.name
        key = model_key(ex.model) if ex.model else ""
        self._going[ex.id] = box, key
        box.in_flight += 1
        box.flight[key] = box.flight.get(key, 0) + 1
        if self.affinity:
            client = self.client_of(ex)
            self._last[client] = box.name
            self._last.move_to_end(client)
            if len(self._last) > AFFINITY_CLIENTS:
                self._last.popitem(last=False)

    def gone(self, ex: Exchange) -> None:
        """`ex` ended (or left its box for the next one): a model that replied there is
        resident (`Box.served`) until the box's next /api/ps read says otherwise."""
        went = self._going.pop(ex.id, None)
        if went is None:
            return
        box, key = went
        box.in_flight -= 1
        if box.flight.get(key, 0) > 1:
            box.flight[key] -= 1
        else:
            box.flight.pop(key, None)
        key = model_key(ex.model) if ex.model else ""
        ok = ex.outcome is Outcome.OK and key and not box.poller.resident(key)
        if ok and (seen := box.loads.outlook(ex)) is not None:
            box.served[key] = seen.opts


def refusal(named: str | None, router: Router) -> str:
    """The 400's message for a request that names no box, or one not configured, where it
    must name one (management routes change one box's models: docs/boxes.md)."""
    names = ", ".join(router.by_name)
    if named is None:
        return (
            f"ollama-tap fronts several Ollama boxes ({names}); management requests change "
            f"one box's models: name it in the {UPSTREAM_HEADER} header, e.g. "
            f"{UPSTREAM_HEADER}: {router.boxes[0].name}"
        )
    return (
        f"{UPSTREAM_HEADER} names {named.strip()!r}, which is not one of this tap's boxes ({names})"
    )
