"""The room a request's fixed head leaves, which the compaction shares apply to.

Instructions and tool schemas go whole with every request, and no compaction can remove
them. A coding agent's can take most of the usable input U (Codex's, about 7,500 tokens, take
70 % of a 16k model's). Applied to the whole of U, the default target of 0.45 would lie below
what the head alone costs: every compaction would land as low as it can go, close to the
trigger, and the next request or the one after would compact again. So the shares that say
when and where to compact are shares of the room the head leaves: share `s` is reached at
`f + s x (1 - f)` of U, where f is the head's share of U; and the compaction block's
allowances are shares of that room too. With no head to speak of (f near 0) nothing changes.
"""

from __future__ import annotations

from typing import Final

from proxy.core.budget import Budget

MAX_FIXED_SHARE: Final = 0.9
"""A head above this share of U counts as this share: the room it leaves is then too small
for the levels to mean anything, and the request is compacted like any that is nearly full."""


def fixed_share(budget: Budget, fixed_tokens: int) -> float:
    """The share of the usable input a head of `fixed_tokens` (ours) takes, at most
    `MAX_FIXED_SHARE`."""
    return min(budget.pressure(fixed_tokens), MAX_FIXED_SHARE)


def in_room(share: float, fixed: float) -> float:
    """The pressure at which `share` of the room a head of `fixed` (a share of U) leaves
    is reached."""
    return fixed + share * (1 - fixed)
