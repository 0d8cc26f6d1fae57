"""The compaction plan: what a conversation becomes before it is forwarded.

`plan_compaction` looks at a request and returns a decision, never performing anything:

- `Unchanged`: forward as is (under the trigger, in cooldown, malformed, nothing to remove);
- `Compacted`: forward these messages instead;
- `NeedsSummary`: the span to summarize; `complete(summary)` with a summary of it (or of its
  first messages: `covered`) gives the `Compacted` result, `fallback()` truncates instead.

A request never waits for a summary (`proxy.service.preparer`): the summary is written ahead
of time and found by the span's keys (`proxy.core.prepared`). What a compaction drops with no
summary covering it is its `dropped` summary task: written afterwards, it is folded into the
next compaction as its previous summary (`rolled`).

Budgets are shares of the usable input U (`proxy.core.budget`): compaction starts when the
prompt passes `compression_trigger` x U and lands at or below `compaction_target` x U, so the
new prefix lasts many requests (the gap between the two is what makes compactions rare). A
request that fits U is compacted only where that reaches the target or frees at least half
that gap (`layers._frees_enough`): a compaction that what must stay keeps near the trigger
would cost the prompt cache for a request's worth of room. The
compaction block, the one message standing for what was removed, has allowances that scale
with U: the ledger of the user's own words, the artifact trail (what removed tool results
and calls mentioned), the summary (capped by `summary_max_tokens`) and the facts the summary
lost. The recent window, kept whole, gets what the target leaves after the instructions, the
tools, the pinned task and the block: at most `keep_recent` messages, whole units only (a tool
call with all its results), the newest unit always.

The strategy's layers run cheapest first and stop at the target:

1. trim a single tool result over `tool_result_max_share` of the window;
2. clear old tool results before the recent window, and cut what users pasted there (logs,
   files, JSON: `proxy.core.pastes`) to head and tail, their words whole;
3. summarize everything before the recent window (rolling: the previous summary is folded in),
   the summary checked against the span's fact ledger;
4. truncate the oldest units.

`context.strategy` picks one layer alone instead of all (`auto`). With `max_context_turns`,
turns older than the budget first shrink to their question and answer.

Landing: when the strategy's layers leave the conversation above the target, a fixed order of
reductions follows, each only while it is still above: clear old tool results, truncate
everything before the recent window, let the pinned task go (its words go to the ledger), cut
the recent window's tool results to head and tail (the oldest first), shorten the block to the
room left (its summary's last lines, then its trail's and its ledger's lowest-ranked entries;
only when that reaches the target), let the running turn's oldest rounds go (only when its
cut rounds do not fit the usable input: they are what must stay). Last, and only
to fit the usable input, never just to reach the target, the text of the newest messages is
cut, never the running turn's user message.

The recent window never starts inside the running turn (from the last user message on) while
anything older can go, and always holds the tool exchange that message follows (the result
the user asks about): the newest results are cut to head and tail, never cleared or dropped,
and the user message that started the running turn is forwarded in place, as sent, the last
of the user's words (a note of the turn's own rounds goes before it, never after the ask). The
result names every step it took. Whatever a user (or a late instruction) said and a step
removed is carried verbatim in the block's ledger (`proxy.core.statements`); the ids, paths,
versions and errors the removed tool results and calls mentioned, in its artifact trail
(`proxy.core.artifacts`), whatever the summary. What a message mentions is found once
(`proxy.core.mentions`).

The modules, in the order a plan runs through them:

- `situation`: what the plan is given (`Situation`) and the budget it derives (`Allowances`);
- `work`: the conversation being compacted, step after step, and what it pins;
- `layers`: `plan_compaction` and the strategy's layers;
- `cuts`: the reductions that keep a message in place (trim, clear, cut to head and tail);
- `eviction`: the span a note replaces, and the note's ledger, trail and calls;
- `summarize`: `NeedsSummary`, the summary checked against the span's facts;
- `landing`: the fixed order of reductions that brings a plan to its target;
- `block`: the compaction block shortened to the room left;
- `emergency`: `plan_emergency`, after the provider said the request overflowed;
- `results`: what a plan returns.
"""

from proxy.core.plan.emergency import plan_emergency
from proxy.core.plan.layers import Plan, plan_compaction
from proxy.core.plan.results import Compacted, SummaryTask, Unchanged
from proxy.core.plan.situation import (
    ARTIFACTS_FLOOR,
    ARTIFACTS_SHARE,
    LEDGER_FLOOR,
    SUMMARY_FLOOR,
    Allowances,
    Counter,
    Situation,
)
from proxy.core.plan.summarize import NeedsSummary

__all__ = [
    "ARTIFACTS_FLOOR",
    "ARTIFACTS_SHARE",
    "LEDGER_FLOOR",
    "SUMMARY_FLOOR",
    "Allowances",
    "Compacted",
    "Counter",
    "NeedsSummary",
    "Plan",
    "Situation",
    "SummaryTask",
    "Unchanged",
    "plan_compaction",
    "plan_emergency",
]
