"""The router: which box an exchange goes to, decided once before it is sent, and why.

Each box is placed in the first tier it qualifies for, and the first box of the best tier
wins (docs/boxes.md, "Routing"):

(a) RESIDENT: the model is resident there and this request would not reload it (the load
    tracker's prediction, rule L2; with --reload-guard, a reload the guard's rewrite spares
    counts as none) — fewest of the tap's exchanges on the box first;
(b) LOADABLE: the box lists the model and loading it there evicts no model with requests
    in flight — the cheapest expected load first (that box's last load of the model);
(c) LISTED: the box lists the model;
then any box (no box lists the model, or the request names none), fewest exchanges first.
A box whose last poll failed is skipped (tried last, in order, if every box is down). Ties
go to the box given first in the configuration: the same state routes the same way.
With `--affinity client`, a client stays on the box it used last while that box is in (a).

What it costs per request (bench/routing.py, 16 boxes): a few dict lookups in an index of the
boxes up and where each model is resident, made when a poll lands (`_holders`), and the
reload prediction only where the model is resident, in the order tier (a) ranks those boxes,
stopping at the first that qualifies. The reason names the boxes ranked before the chosen one
and why each lost. Nothing else is ranked: the next box is chosen, from the state then, only
when the first fails before replying (`plan(ex, tried)`).
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable, Collection, Sequence
from typing import Any, Final

from ollama_tap.boxes.box import UPSTREAM_HEADER, Box
from ollama_tap.exchange import Exchange, Outcome
from ollama_tap.facts import GuardedField, Route, RouteTier
from ollama_tap.loads.state import Outlook
from ollama_tap.loads.tracker import Known
from ollama_tap.ollama.names import model_key
from ollama_tap.ollama.options import Change

AFFINITY_CLIENTS: Final = 4096
"""Clients whose last box `--affinity client` remembers (least recently routed go first)."""
REFRESH: Final = 1.0
"""Seconds the router's index of the boxes (`Router._holders`) is kept at most."""
KEYS: Final = 1024
"""Model names whose key (`model_key`) the router keeps: the names clients send are few, but
any string can be one, so the memo starts over when full."""

Spared = Callable[[Exchange, list[Change]], tuple[GuardedField, ...]]
"""The reload guard's verdict (ReloadGuard.spares): the rewrite it would make of a request
for a runner these changes would reload; empty when it would not act."""


def load_cost(box: Box, model: str) -> tuple[float, int]:
    """What a load of `model` on the box is expected to cost: the seconds its last load
    there took (unknown: last), then the models resident on the box per its last /api/ps and
    the replies since (the fewest, the least likely to evict one)."""
    last = box.loads.last_load(model)
    return last if last is not None else math.inf, len(box.poller.loaded_keys() | box.served.keys())


def _rank(box: Box) -> tuple[int, int]:
    return box.in_flight, box.index


class Plan:
    """The box an exchange goes to, the route it takes there, and the runner options it asks
    for there when the router asked (`going` keeps them for `gone`)."""

    __slots__ = ("box", "opts", "route")

    def __init__(self, box: Box, route: Route, opts: dict[str, Any] | None = None) -> None:
        self.box = box
        self.route = route
        self.opts = opts


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
        self.spared: Spared | None = None
        """The reload guard's verdict, when --reload-guard is on (the app wires it in)."""
        self._going: dict[str, tuple[Box, str | None, str, dict[str, Any] | None]] = {}
        """Each exchange on a box, with its model, the key it is counted under and the runner
        options it asked for there, when known."""
        self._keys: dict[str, str] = {}
        self._up: list[Box] = []
        self._index: dict[str, list[Box]] = {}
        """The boxes up each model key is resident on (`_holders`), made until `_until`."""
        self._until = 0.0
        self._costs: dict[str, dict[str, tuple[float, int]]] = {}
        """`load_cost` by box name and model key, kept as long as the index, and a box's
        until an exchange there ends (a reply may be a load, or make a model resident)."""
        for box in self.boxes:
            box.poller.on_ps(self._stale)  # after the box's own listener clears `served`

    def key_of(self, model: str | None) -> str:
        """`model_key(model)`, remembered ("" for no model)."""
        if not model:
            return ""
        key = self._keys.get(model)
        if key is None:
            if len(self._keys) >= KEYS:
                self._keys.clear()
            key = self._keys[model] = model_key(model)
        return key

    def plan(
        self, ex: Exchange, tried: Collection[Box] = (), *, unread: bool = False
    ) -> Plan | None:
        """The best box for `ex` but those `tried`, and the route to it; None when every box
        was tried. `unread`: its body streams in, so its model is not known yet. Nothing is
        noted: the caller counts the exchange on the box it sends to (`going`)."""
        model = ex.model
        key = self.key_of(model)
        up, holders = self._holders(key)
        if tried:  # a failover: rare
            up = [b for b in up if b not in tried]
            holders = [b for b in holders if b not in tried]
        notes: list[str] = []
        seen: dict[str, Outlook] = {}
        if holders:
            chosen = self._resident(ex, key, holders, notes, seen)
            if chosen is not None:
                box, why = chosen
                plan = self._plan(box, RouteTier.RESIDENT, why, notes)
                plan.opts = seen[box.name].opts
                return plan
        # Tiers (b) to (d) end in a load, or go to any box: what else is up is named too.
        if not up:
            left = [b for b in self.boxes if b not in tried]
            if not left:
                return None
            why = f"every box is down; trying {left[0].name} first"
            return self._plan(left[0], RouteTier.UNLISTED, why, [])
        notes += [f"{b.name} is down" for b in self.boxes if b.poller.known_down]
        if model:
            listed = [b for b in up if b.poller.has(key)]
            if listed:
                return self._listed(model, key, listed, seen, notes)
            what = f"no box up lists {model}"
        else:
            what = (
                "the body streams in, its model unread" if unread else "the request names no model"
            )
        box = min(up, key=_rank)
        why = f"{what}; {box.name} has the fewest exchanges"
        return self._plan(box, RouteTier.UNLISTED, why, notes)

    def _holders(self, key: str) -> tuple[list[Box], list[Box]]:
        """The boxes up, and those of them the model of `key` is resident on (per their last
        /api/ps, or a reply since), in the configuration's order: made when a poll lands
        (any box's /api/ps read, or its failure), when a reply lands on a box the model was
        not resident on, and at least every REFRESH seconds (a box back up whose /api/ps
        read failed, another name of a resident model's digest in /api/tags), rather than
        read from every box for every request."""
        now = time.monotonic()
        if now >= self._until:
            self._index.clear()
            self._costs.clear()
            self._up = [b for b in self.boxes if not b.poller.known_down]
            self._until = now + REFRESH
        holders = self._index.get(key)
        if holders is None:
            if len(self._index) >= KEYS:
                self._index.clear()
            holders = self._index[key] = [
                b for b in self._up if key in b.served or b.poller.resident(key)
            ]
        return self._up, holders

    def _stale(self, _: object = None) -> None:
        self._until = 0.0

    def _resident(
        self, ex: Exchange, key: str, holders: list[Box], notes: list[str], seen: dict[str, Outlook]
    ) -> tuple[Box, str] | None:
        """The first box of tier (a) and its reason, asking the reload prediction of the boxes
        the model is resident on in the order the tier ranks them (the client's last box
        first with --affinity); each that would reload before it is noted, and its outlook
        kept in `seen` for (b)."""
        if len(holders) > 1:
            holders = sorted(holders, key=_rank)
            if self.affinity:
                last = self._last.get(self.client_of(ex))
                holders.sort(key=lambda b: b.name != last)  # stable: the rest keep their rank
        known: Known = {}
        model = ex.model
        for box in holders:
            outlook = box.loads.outlook(ex, known)
            if outlook is None:  # a route that loads nothing (/api/show): any box with it
                return None
            seen[box.name] = outlook
            if outlook.resident:
                if not outlook.reloads:
                    return box, self._on(box, model)
                if self.spared is not None and (kept := self.spared(ex, outlook.changes)):
                    held = ", ".join(f"{f.field} {f.resident}" for f in kept)
                    asked = ", ".join(f"{f.field} {f.sent}" for f in kept)
                    why = f"{model} resident on {box.name} ({held} kept by the reload guard"
                    return box, f"{why}; the request asked {asked})"
                changes = ", ".join(c.text for c in outlook.changes if c.certain)
                notes.append(f"{box.name} would have reloaded for {changes}")
            elif box.served.get(key) == outlook.opts:
                return box, self._on(box, model)  # replied here since the last read, alike
        return None

    @staticmethod
    def _on(box: Box, model: str | None) -> str:
        ctx = box.poller.context_length(model)
        return (
            f"{model} resident on {box.name} with num_ctx {ctx}"
            if ctx
            else f"{model} resident on {box.name}"
        )

    def _listed(
        self, model: str, key: str, listed: list[Box], seen: dict[str, Outlook], notes: list[str]
    ) -> Plan:
        """Tier (b), else (c), among the boxes up that list the model."""
        loadable: list[tuple[float, int, int, int, Box]] = []
        for box in listed:
            # Busy: the tap's exchanges on the box now (a load there may evict their model,
            # or reload the very runner they use); the tap does not know its free memory.
            mine = box.flight.get(key, 0)
            outlook = seen.get(box.name)
            if box.in_flight == mine and not (outlook is not None and outlook.resident and mine):
                loadable.append((*self._cost(box, model, key), box.in_flight, box.index, box))
        if loadable:
            cost, _, _, _, box = min(loadable, key=lambda r: r[:4])
            last = f", last load {cost:.1f} s" if math.isfinite(cost) else ""
            why = (
                f"{model} not resident without a reload; {box.name} can load it without "
                f"evicting a busy model, with fewest models resident{last}"
            )
            return self._plan(box, RouteTier.LOADABLE, why, notes)
        box = min(listed, key=_rank)
        why = f"{model} listed on {box.name}; every box that lists it is busy"
        return self._plan(box, RouteTier.LISTED, why, notes)

    def _cost(self, box: Box, model: str, key: str) -> tuple[float, int]:
        costs = self._costs.setdefault(box.name, {})
        cost = costs.get(key)
        if cost is None:
            if len(costs) >= KEYS:
                costs.clear()
            cost = costs[key] = load_cost(box, model)
        return cost

    @staticmethod
    def _plan(box: Box, tier: RouteTier, reason: str, notes: list[str]) -> Plan:
        """The plan to `box`: the reason, then why each box ranked before it lost."""
        if notes:
            mine = box.name + " "
            reason = "; ".join([reason, *(n for n in notes if not n.startswith(mine))])
        return Plan(box, Route(box.name, tier, reason))

    def going(self, ex: Exchange, plan: Plan) -> None:
        """`ex` is sent to the plan's box: counted there, under its model as known now, until
        `gone`."""
        box = plan.box
        ex.box = box.name
        model = ex.model
        key = self.key_of(model)
        opts = plan.opts if ex.reload_guard is None else None  # a rewrite asks for others
        self._going[ex.id] = box, model, key, opts
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
        box, model, key, opts = went
        self._costs.pop(box.name, None)
        box.in_flight -= 1
        if box.flight.get(key, 0) > 1:
            box.flight[key] -= 1
        else:
            box.flight.pop(key, None)
        if ex.outcome is not Outcome.OK:
            return
        if ex.model != model:  # the body was read after the exchange was routed
            key, opts = self.key_of(ex.model), None
        if not key or box.poller.resident(key):
            return
        if opts is None and (seen := box.loads.outlook(ex)) is not None:
            opts = seen.opts
        if opts is not None:
            if key not in box.served:
                self._index.pop(key, None)  # resident on one box more
            box.served[key] = opts


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
