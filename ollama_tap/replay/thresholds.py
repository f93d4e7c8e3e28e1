"""`--fail-if` rules: a small grammar over the aggregate now/recorded ratios.

    rule   := figure ["." stat] op number
    figure := ttft | ttfc | decode_rate | prefill_rate | load | output_tokens | duration
    stat   := p50 | p95            (default p50)
    op     := "<" | "<=" | ">" | ">="

A rule fails when the ratio (now over recorded) satisfies it: ``decode_rate < 0.8`` fails
when the median decode rate fell below 80 % of the recorded one, ``ttft.p95 > 1.5`` when
the 95th-percentile time to first token grew by half. A ratio that cannot be taken (no
request had the figure on both sides) fails the rule: a check that cannot run is no pass.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

FIGURES: Final = ("ttft", "ttfc", "decode_rate", "prefill_rate", "load", "output_tokens",
                  "duration")  # fmt: skip
STATS: Final = ("p50", "p95")
_OPS: Final[dict[str, Callable[[float, float], bool]]] = {
    "<=": operator.le, ">=": operator.ge, "<": operator.lt, ">": operator.gt,
}  # fmt: skip
_RULE: Final = re.compile(
    r"^\s*(?P<figure>[a-z_]+)(?:\.(?P<stat>p\d+))?\s*(?P<op><=|>=|<|>)\s*"
    r"(?P<number>[0-9]*\.?[0-9]+)\s*$"
)


@dataclass(frozen=True, slots=True)
class Rule:
    text: str
    figure: str
    stat: str
    op: str
    number: float

    def check(self, aggregate: dict[str, Any]) -> dict[str, Any]:
        """{"rule", "ratio", "failed"} for the aggregate `report.aggregate` made."""
        ratio = ((aggregate.get(self.figure) or {}).get("ratio") or {}).get(self.stat)
        failed = ratio is None or _OPS[self.op](ratio, self.number)
        return {"rule": self.text, "ratio": ratio, "failed": failed}


def parse_rule(text: str) -> Rule:
    """A rule, or ValueError naming what is wrong (argparse shows it)."""
    found = _RULE.match(text)
    if found is None:
        raise ValueError(f"{text!r} is no rule; write e.g. 'decode_rate < 0.8' or 'ttft.p95 > 1.5'")
    figure, stat = found["figure"], found["stat"] or "p50"
    if figure not in FIGURES:
        raise ValueError(f"{figure!r} is no figure; one of {', '.join(FIGURES)}")
    if stat not in STATS:
        raise ValueError(f"{stat!r} is no statistic; one of {', '.join(STATS)}")
    return Rule(text.strip(), figure, stat, found["op"], float(found["number"]))
