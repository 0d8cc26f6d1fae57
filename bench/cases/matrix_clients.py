"""The matrix's clients: one workload, spoken over chat completions or the Responses API.

Both play the same agent with the official `openai` SDK, resending the whole history every
call as stateless clients do: the user's turn, then, while the model asks for tools, the
model's output and each tool's result (the sizes the workload planned), until it answers.

- `ChatClient`: `client.chat.completions.create`; the workload's system prompt is the first
  message, the model's answers assistant messages, tool results `tool` messages.
- `ResponsesClient`: `client.responses.create` as Codex and the Agents SDK with
  `store=False` use it: the system prompt is `instructions`, the user's turns `message`
  items with `input_text` parts, the model's output items are sent back as they came
  (reasoning items with their `encrypted_content` included: the request asks for it), tool
  results `function_call_output` items; tools in the Responses API's flat form.

- `MessagesClient` (`matrix_messages.py`): `client.messages.create` with the official
  `anthropic` SDK, as Claude Code sends it.

- `CompactingResponsesClient`: the same, compacting its own history as Codex does: when its
  count of what it would send next passes `COMPACT_AT` of the window, it calls
  `client.responses.compact` (through the proxy, which answers it) and goes on from the
  output, the user's messages and one compaction item, in place of its history.

A workload with a preamble (aider's few-shot exchanges) has it sent after the system prompt,
as the history's start. A workload with working sets (aider's files message) has each turn's
sent with every request of that turn, just before the turn's ask, with the assistant's
acknowledgement after it: no part of the history the client keeps (the next turn sends its
own version in the same place), as aider rebuilds each request from its parts.

With `stream`, every answer is streamed and added up as a client does
(`proxy.demo.streams`). A tool call for a tool the client never offered (the proxy's own
`context_recall`, leaked) is counted, and the turn given up: a client's loop fails on it.

Each client also knows how to read, from the mock's recording, what the proxy forwarded in
its API: the conversation of each forwarded request (summary requests apart) and the text
the statement checks search.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final

import anthropic
import openai

from bench.config import Api
from bench.measures import CellResult
from bench.workloads import UserTurn, Workload, tool_output
from proxy.core.budget import Budget, request_budget
from proxy.core.messages import Message, role
from proxy.core.plan.cuts import LEAST_CUT, WORTH_CUTTING
from proxy.core.policy import ContextPolicy
from proxy.core.recall import recall_id
from proxy.core.responses import chat_view
from proxy.core.tokens import TokenCounter
from proxy.core.tool_results import clear, is_cleared, trim
from proxy.demo.streams import StreamedMessage, StreamedResponse
from proxy.mock_upstream import MockUpstream, Recorded, responses_prompt_tokens

MODEL: Final = "mock-model"
TOKEN_FACTOR: Final = 1.1
"""The provider's tokens per token of ours: its tokenizer counts 10 % more."""
ENCRYPTED_REASONING: Final = "reasoning.encrypted_content"
_FALLBACK_TOOL_TOKENS: Final = 200
"""A tool result in a turn the plan gave none (the chatty workload offers no tools)."""
_ROUNDS_CAP: Final = 2
"""A turn's tool rounds stop at this many times its planned rounds (plus 2)."""
COMPACT_AT: Final = 0.9
"""The share of the window at which the compacting client compacts: Codex's default
(`model_auto_compact_token_limit`, 90 % of `model_context_window`)."""


@dataclass(frozen=True, slots=True)
class Call:
    """A tool call the model asked for."""

    id: str
    name: str
    arguments: str = ""


class StreamFailedError(Exception):
    """A streamed answer that ended in a failure event instead of completing."""


def cell_budget(window: int) -> Budget:
    """The budget the proxy's defaults give a request of the matrix's clients at `window`,
    calibrated as the proxy calibrates it against the mock (`TOKEN_FACTOR`): its pressures
    are the `x-context-pressure` the proxy reports."""
    policy = ContextPolicy()
    return request_budget(
        window,
        {},
        output_reserved=policy.output_reserved,
        margin_share=policy.safety_margin,
        calibration=TOKEN_FACTOR,
    )


def must_stay(workload: Workload, turn: UserTurn, counter: TokenCounter) -> int:
    """What no compaction may remove from `turn`'s requests (our count, in chat's form): the
    instructions and tools, the working set and its acknowledgement, the ask."""
    kept = [
        {"role": "system", "content": workload.system},
        {"role": "user", "content": turn.working_set},
        {"role": "assistant", "content": workload.working_reply},
        {"role": "user", "content": turn.text},
    ]
    return counter.request({"messages": kept, "tools": list(workload.tools)})


LEAST_RESULT: Final = 128
"""An older tool result no longer than this may be forwarded whole: a one-line placeholder
would save next to nothing."""


def _path(call: Call) -> str | None:
    """The `path` a `read_file` call asks for."""
    if call.name != "read_file":
        return None
    try:
        path = json.loads(call.arguments).get("path")
    except (json.JSONDecodeError, AttributeError):
        return None
    return path if isinstance(path, str) else None


@dataclass(slots=True)
class MatrixClient:
    """The agent's side of one cell: the SDK, the history it resends, what it saw."""

    api: ClassVar[Api]
    path: ClassVar[str]
    """The endpoint's path, as the mock records it."""

    sdk: Any
    """The API's official async client: `openai.AsyncOpenAI`, or `anthropic.AsyncAnthropic`
    for the Messages API."""
    workload: Workload
    upstream: MockUpstream
    counter: TokenCounter
    cell: CellResult
    history: list[Any] = field(default_factory=list)
    tools_run: int = 0
    answered: bool = False
    calls: list[list[str]] = field(default_factory=list)
    """The ids of the tool calls of each user turn, in the order they were run."""
    stream: bool = False
    finals: list[str] = field(default_factory=list)
    """Each user turn's final answer ("" for a turn given up)."""
    written: dict[str, str] = field(default_factory=dict)
    """The id of the call each of the workload's files answered, by its path."""
    first_calls: list[int] = field(default_factory=list)
    """The model calls made before each user turn."""
    mark: int = 0
    """Where the running turn's items begin in the history (what abandoning it drops)."""
    compacted_at: list[int] = field(default_factory=list)
    """How many requests had been forwarded when the client compacted, each time."""
    condensed: set[str] = field(default_factory=set)
    """The tool calls the client's own compactions took out of its history."""
    condensed_at: dict[str, int] = field(default_factory=dict)
    """...each with the number of requests forwarded before the compaction that took it:
    the requests from that one on no longer carry it, whatever the proxy does."""
    ask_at: int = 0
    """Where the running turn's user message is in the history (its working set goes in
    front of it)."""
    working: list[Any] = field(default_factory=list)
    """The running turn's working set as the API's messages (the files message and the
    assistant's acknowledgement), sent with each of its requests; [] for none."""
    outputs: dict[str, str] = field(default_factory=dict)
    """The text of each tool result the client sent, by its call's id."""
    call_args: dict[str, tuple[str, str]] = field(default_factory=dict)
    """Each tool call the model asked for, by its id: its name and arguments."""
    asking: str = ""
    """The running turn's user message."""
    floor: float = float("nan")
    """What must stay of the running turn's next request (the instructions, the working set,
    the ask, its rounds at their least) as a share of the usable input; nan where the
    workload judges none."""
    cut_floor: float = float("nan")
    """`floor` with the running turn's older results at the proxy's least cut, whether or
    not they fit: above 1, the proxy may leave them as placeholders (`clear_recent`)."""

    def start(self) -> None:
        """The history's start: the API's head, then the workload's preamble."""
        self._head()
        for user, assistant in self.workload.preamble:
            self.history += [self._user(user), self._assistant(assistant)]

    async def turn(self, turn: UserTurn) -> None:
        """One user turn: send, run the requested tools, repeat until the model answers."""
        self.first_calls.append(self.cell.model_calls)
        self.finals.append("")
        self.mark = self.ask_at = len(self.history)
        self.asking = turn.text
        self.history.append(self._user(turn.text))
        self._set_working(turn)
        ran: list[str] = []
        self.calls.append(ran)
        # An agent that asks for more rounds than planned (its turn's start compacted away)
        # gets results of the planned sizes again (and never the written ones), up to a cap.
        sizes = itertools.cycle(turn.tool_tokens or (_FALLBACK_TOOL_TOKENS,))
        cap = _ROUNDS_CAP * len(turn.tool_tokens) + 2
        while True:
            self.cell.model_calls += 1
            if self.workload.running_turn:
                self.floor = self.running_floor(turn, ran)
            try:
                calls = await self._complete()
            except (openai.APIError, anthropic.APIError, StreamFailedError) as exc:
                self._failed(exc)
                del self.history[self.mark :]  # the turn is abandoned, as an agent would
                return
            if self._unknown(calls):
                del self.history[self.mark :]
                return
            self.cell.extra_rounds += bool(calls) and len(ran) >= len(turn.tool_tokens)
            if not calls:
                self.finals[-1] = self._final()
                return
            if len(ran) >= cap:
                # A proxy that keeps hiding the turn's first rounds would keep the agent
                # running them again for ever: it gives up on the turn instead.
                self.cell.abandoned_turns += 1
                del self.history[self.mark :]
                return
            for call in calls:
                self.call_args[call.id] = (call.name, call.arguments)
                self.tools_run += 1
                size = next(sizes)
                written = turn.texts[len(ran)] if len(ran) < len(turn.texts) else None
                written = written or self._file(call)
                output = written or tool_output(call.name, size, self.tools_run, self.counter)
                ran.append(call.id)
                self.outputs[call.id] = output
                self.history.append(self._result(call, output))

    def _set_working(self, turn: UserTurn) -> None:
        """The running turn's working set, and what must stay of its requests (`floor`)."""
        self.working = []
        if not turn.working_set:
            return
        self.working = [self._user(turn.working_set), self._assistant(self.workload.working_reply)]
        tokens = must_stay(self.workload, turn, self.counter)
        self.floor = self.cut_floor = cell_budget(self.cell.window).pressure(tokens)

    def running_floor(self, turn: UserTurn, ran: list[str]) -> float:
        """What must stay of the running turn's next request, as a share of the usable
        input: what `must_stay` counts, every call the turn made, each older result at its
        least and the newest whole (our count, in chat's form). An older result's least is
        the proxy's least cut (`LEAST_CUT`: its note and a few lines) while the request fits
        the usable input with them, else the placeholder of a cleared result. A result the
        proxy cleared already counts at its placeholder: cleared results stay cleared (the
        prompt cache), and the proxy keeps the ones after them cut while that fits."""
        tokens = must_stay(self.workload, turn, self.counter)
        cleared = self._cleared() if ran else set()
        cut = smallest = placeholders = mixed = mixed_smallest = 0
        for index, call_id in enumerate(ran):
            name, arguments = self.call_args[call_id]
            function = {"name": name, "arguments": arguments}
            call = {"id": call_id, "type": "function", "function": function}
            tokens += self.counter.message({"role": "assistant", "tool_calls": [call]})
            tokens += self.carried(call_id)
            output = {"role": "tool", "tool_call_id": call_id, "content": self.outputs[call_id]}
            if index == len(ran) - 1:
                tokens += self.counter.message(output)
                continue
            least, small = self._least(output), self.counter.message(self._cut(output, name))
            placeholder = self.counter.message(self._placeholder(output, name))
            cut, smallest, placeholders = cut + least, smallest + small, placeholders + placeholder
            mixed += placeholder if call_id in cleared else least
            mixed_smallest += placeholder if call_id in cleared else small
        budget = cell_budget(self.cell.window)
        self.cut_floor = budget.pressure(tokens + smallest)
        # Where the cuts can fit, the proxy keeps them: what must stay is then at most the
        # usable input, however their least counts.
        if budget.pressure(tokens + smallest) <= 1.0:
            return min(budget.pressure(tokens + cut), 1.0)
        if cleared and budget.pressure(tokens + mixed_smallest) <= 1.0:
            return min(budget.pressure(tokens + mixed), 1.0)
        return budget.pressure(tokens + placeholders)

    def _cleared(self) -> set[str]:
        """The running turn's results the proxy's last forwarded request carried cleared."""
        sent = self.forwarded()
        if not sent:
            return set()
        return {
            str(message.get("tool_call_id"))
            for message in self.messages(sent[-1].json())
            if role(message) == "tool" and is_cleared(message)
        }

    def _recall(self, result: Message) -> str | None:
        return recall_id("bench", [result]) if self.cell.recall else None

    def carried(self, call_id: str) -> int:
        """What the client's history carries with a call beyond chat's form and the proxy
        forwards with it, never apart (a Responses reasoning item before it)."""
        return 0

    def _least(self, result: Message) -> int:
        """The tokens an older result of the running turn keeps at the proxy's least cut:
        all of it when a cut would hardly make it smaller (`_worth_cutting`), else the least
        the proxy states (`LEAST_CUT`). Not what a cut of ours comes to (`_cut`): a cut lands
        under its size by the lines its head and tail end on, and those differ between the
        original and a result the proxy cut before (by 10 tokens a result, 0.016 of an 8k
        window's usable input over a dozen rounds)."""
        size = self.counter.message(result)
        return size if size <= WORTH_CUTTING else LEAST_CUT

    def _cut(self, result: Message, tool: str) -> Message:
        """An older result of the running turn as small as the proxy's least cut makes it:
        itself when a cut would hardly make it smaller (`_worth_cutting`), else its head and
        tail (whether the cuts can fit the usable input at all)."""
        if self.counter.message(result) <= WORTH_CUTTING:
            return result
        count = self.counter.text
        recall = self._recall(result)
        return trim(result, max_tokens=LEAST_CUT, count=count, tool_name=tool, recall=recall)

    def _placeholder(self, result: Message, tool: str) -> Message:
        """An older result of the running turn cleared, its round kept (a folded round is one
        an agent may run again): itself when short (a placeholder would save next to
        nothing), else the placeholder naming its tool, its size and its recall id."""
        size = self.counter.message(result)
        if size <= LEAST_RESULT:
            return result
        return clear(result, tool, size, recall=self._recall(result))

    def outgoing(self) -> list[Any]:
        """The history as the client sends it: the running turn's working set (if any) just
        before its ask."""
        if not self.working:
            return self.history
        at = self.ask_at
        return [*self.history[:at], *self.working, *self.history[at:]]

    def _file(self, call: Call) -> str | None:
        """The workload's file `call` reads, if it wrote that one (the call is noted)."""
        path = _path(call)
        if path is None or path not in self.workload.files:
            return None
        self.written[path] = call.id
        return self.workload.files[path]

    def _unknown(self, calls: list[Call]) -> bool:
        """Whether the model asked for a tool the client never offered (counted)."""
        offered = {tool["function"]["name"] for tool in self.workload.tools}
        unknown = sum(call.name not in offered for call in calls)
        self.cell.unknown_calls += unknown
        return unknown > 0

    def _failed(self, exc: Exception) -> None:
        self.cell.client_errors += 1
        if len(self.cell.error_samples) < 3:
            self.cell.error_samples.append(f"{type(exc).__name__}: {exc}"[:300])

    def _answered(self, headers: Any) -> None:
        """What the proxy said of one answered request, in its headers."""
        if not self.answered:
            # The proxy calibrates its counts from the first answer's `usage`: overflows
            # before it are the estimate's, overflows after it are the policy's.
            self.answered = True
            self.cell.overflows_before_first_answer = self.upstream.overflows
        self.cell.applied.append(headers.get("x-compaction-applied", "none"))
        self.cell.pressures.append(float(headers.get("x-context-pressure", "nan")))
        self.cell.stated.append(float(headers.get("x-compaction-target", "nan")))
        self.cell.floors.append(self.floor)
        self.cell.cut_floors.append(self.cut_floor)

    def forwarded(self) -> list[Recorded]:
        """The requests the proxy forwarded in this client's API, summary requests apart
        (the proxy's summarizer speaks chat completions whatever the client's API)."""
        summaries = {id(r) for r in self.upstream.summary_requests}
        return [
            r for r in self.upstream.requests
            if r.path.endswith(self.path) and id(r) not in summaries
        ]  # fmt: skip

    # What each API defines.

    def _head(self) -> None:
        """What opens the history (chat's system message; the other APIs send it apart)."""
        raise NotImplementedError

    def _user(self, text: str) -> Any:
        raise NotImplementedError

    def _assistant(self, text: str) -> Any:
        """An assistant message of the client's own (a preamble's, an acknowledgement)."""
        raise NotImplementedError

    def _result(self, call: Call, output: str) -> Any:
        raise NotImplementedError

    async def _complete(self) -> list[Call]:
        """One model call with the whole history; the model's output joins the history.
        Returns the tool calls it asks for (none: it answered)."""
        raise NotImplementedError

    def _final(self) -> str:
        """The text of the answer that ended the turn (the history's last output)."""
        raise NotImplementedError

    def history_tokens(self) -> int:
        """The client's whole history (our count), as it sends it."""
        raise NotImplementedError

    def body_tokens(self, body: Any) -> int:
        """A forwarded body's prompt, our count as the provider counts (its pressure is
        `cell_budget(window).pressure` of it)."""
        raise NotImplementedError

    @staticmethod
    def conversation(body: Any) -> list[Any]:
        """The part of a forwarded body that grows with the conversation."""
        raise NotImplementedError

    @staticmethod
    def seen(body: Any) -> str:
        """Every field of a forwarded body that reaches the model as the conversation:
        wherever the proxy put a statement, the statement checks find it there."""
        raise NotImplementedError

    @staticmethod
    def messages(body: Any) -> list[Message]:
        """A forwarded body as the chat messages the proxy's core reads (`bench.forwarded`
        judges them)."""
        raise NotImplementedError


class ChatClient(MatrixClient):
    """The workload over `POST /v1/chat/completions`."""

    api = "chat"
    path = "/chat/completions"

    def _head(self) -> None:
        self.history.append({"role": "system", "content": self.workload.system})

    def _user(self, text: str) -> Any:
        return {"role": "user", "content": text}

    def _assistant(self, text: str) -> Any:
        return {"role": "assistant", "content": text}

    def _result(self, call: Call, output: str) -> Any:
        return {"role": "tool", "tool_call_id": call.id, "content": output}

    async def _complete(self) -> list[Call]:
        body: dict[str, Any] = {"model": MODEL, "messages": self.outgoing()}
        if self.workload.tools:
            body["tools"] = list(self.workload.tools)
        if self.stream:
            raw = await self.sdk.chat.completions.with_raw_response.create(**body, stream=True)
            self._answered(raw.headers)
            streamed = StreamedMessage()
            async for chunk in raw.parse():
                streamed.add(chunk)
            message = streamed.message()
        else:
            raw = await self.sdk.chat.completions.with_raw_response.create(**body)
            self._answered(raw.headers)
            message = raw.parse().choices[0].message.model_dump(exclude_none=True)
        self.history.append(message)
        calls = message.get("tool_calls") or []
        return [
            Call(call["id"], call["function"]["name"], call["function"]["arguments"])
            for call in calls
        ]

    def _final(self) -> str:
        return str(self.history[-1].get("content") or "")

    def history_tokens(self) -> int:
        body = {"messages": self.outgoing(), "tools": list(self.workload.tools)}
        return self.counter.request(body)

    def body_tokens(self, body: Any) -> int:
        return self.counter.request(body)

    @staticmethod
    def conversation(body: Any) -> list[Any]:
        messages: list[Any] = body["messages"]
        return messages

    @staticmethod
    def seen(body: Any) -> str:
        return json.dumps(body["messages"], ensure_ascii=False)

    @staticmethod
    def messages(body: Any) -> list[Message]:
        messages: list[Message] = body["messages"]
        return messages


def flat_tools(tools: tuple[dict[str, Any], ...]) -> list[dict[str, Any]]:
    """Chat's tool schemas in the Responses API's form: `function`'s fields at the top."""
    return [{"type": "function", **tool["function"]} for tool in tools]


class ResponsesClient(MatrixClient):
    """The workload over `POST /v1/responses`, stateless (`store=False`), reasoning included."""

    api = "responses"
    path = "/responses"

    def _head(self) -> None:
        pass  # the system prompt is each request's `instructions`

    def _user(self, text: str) -> Any:
        return {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": text}],
        }

    def _assistant(self, text: str) -> Any:
        return {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": text}],
        }

    def _result(self, call: Call, output: str) -> Any:
        return {"type": "function_call_output", "call_id": call.id, "output": output}

    async def _complete(self) -> list[Call]:
        body: dict[str, Any] = {
            "model": MODEL,
            "instructions": self.workload.system,
            "include": [ENCRYPTED_REASONING],
            "store": False,
            # The same JSON as `input=`, without the SDK's walk of every item against its
            # TypedDicts (`async_maybe_transform`): over a few hundred items that walk took
            # 85 % of the bench process's time and made a cell 4x slower than over chat.
            "extra_body": {"input": self.outgoing()},
        }
        if self.workload.tools:
            body["tools"] = flat_tools(self.workload.tools)
        if self.stream:
            output = await self._streamed(body)
        else:
            raw = await self.sdk.responses.with_raw_response.create(**body)
            self._answered(raw.headers)
            output = [item.model_dump(exclude_none=True) for item in raw.parse().output]
        self.history += output  # reasoning, message and calls, as they came
        return [
            Call(i["call_id"], i["name"], i["arguments"])
            for i in output
            if i["type"] == "function_call"
        ]

    async def _streamed(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        """The output items of a streamed answer. A call announced in the stream (its
        `output_item.added`) that the finished items lack was shown to the client all the
        same: one for a tool it never offered is counted."""
        raw = await self.sdk.responses.with_raw_response.create(**body, stream=True)
        self._answered(raw.headers)
        streamed, announced = StreamedResponse(), {}
        async for event in raw.parse():
            streamed.add(event)
            if event.type == "response.output_item.added" and event.item.type == "function_call":
                announced[event.item.call_id] = event.item.name
        if streamed.failure is not None:
            raise StreamFailedError(streamed.failure)
        output = streamed.output()
        finished = {item.get("call_id") for item in output}
        offered = {tool["function"]["name"] for tool in self.workload.tools}
        self.cell.unknown_calls += sum(
            name not in offered and call not in finished for call, name in announced.items()
        )
        return output

    def _final(self) -> str:
        last = self.history[-1] if self.history else {}
        if last.get("type") != "message":
            return ""
        return "".join(
            part.get("text", "")
            for part in last.get("content") or []
            if part.get("type") == "output_text"
        )

    def carried(self, call_id: str) -> int:
        # The reasoning items the call's round opened with: the provider refuses a call
        # without them, so they stay whole with it (as the provider counts them).
        pending: list[Any] = []
        for item in self.history:
            if item.get("type") == "reasoning":
                pending.append(item)
            elif item.get("type") == "function_call" and item.get("call_id") == call_id:
                return responses_prompt_tokens({"input": pending}, self.counter) - (
                    responses_prompt_tokens({"input": []}, self.counter)
                )
            else:
                pending = []
        return 0

    def history_tokens(self) -> int:
        # As the provider counts items (a reasoning item as a quarter of its ciphertext),
        # with our tokenizer: the proxy's count prices reasoning as its JSON, far higher.
        body = {
            "instructions": self.workload.system,
            "input": self.outgoing(),
            "tools": flat_tools(self.workload.tools),
        }
        return responses_prompt_tokens(body, self.counter)

    def body_tokens(self, body: Any) -> int:
        return responses_prompt_tokens(body, self.counter)

    @staticmethod
    def conversation(body: Any) -> list[Any]:
        items: list[Any] = body["input"]
        return items

    @staticmethod
    def seen(body: Any) -> str:
        return json.dumps([body.get("instructions"), body["input"]], ensure_ascii=False)

    @staticmethod
    def messages(body: Any) -> list[Message]:
        messages: list[Message] = chat_view(body)["messages"]
        return messages


class CompactingResponsesClient(ResponsesClient):
    """The Responses client, compacting its own history through `/v1/responses/compact`
    before a call once its count of it passes `COMPACT_AT` of the window."""

    _grown: bool = False
    """Whether the history grew by a model call since the client last compacted it."""
    _pending: str | None = None
    """What the proxy said it did at the client's last compaction, until an answer lands."""

    async def _complete(self) -> list[Call]:
        if self._grown and self.history_tokens() >= COMPACT_AT * self.cell.window:
            await self._compact()
        self._grown = True
        return await super()._complete()

    async def _compact(self) -> None:
        # The working set is no part of the history: the client sends its newest copy
        # with every request, the compacted history included.
        raw = await self.sdk.responses.with_raw_response.compact(
            model=MODEL,
            instructions=self.workload.system,
            extra_body={"input": self.history},  # as `_complete` sends it (see there)
        )
        output: list[Any] = json.loads(raw.content)["output"]
        kept = {json.dumps(item, sort_keys=True) for item in output}
        condensed = {
            item["call_id"]
            for item in self.history
            if item.get("type") == "function_call" and json.dumps(item, sort_keys=True) not in kept
        }
        self.condensed |= condensed
        for call in condensed:
            self.condensed_at.setdefault(call, len(self.forwarded()))
        self.history = output
        # The running turn's user message is in the output now: an abandoned turn drops
        # only what it added since, and its working set goes before that message.
        self.mark = len(output)
        self.ask_at = self._ask_in(output)
        self.compacted_at.append(len(self.forwarded()))
        self.cell.client_compactions += 1
        self._grown = False
        self._pending = raw.headers.get("x-compaction-applied", "none")

    def _ask_in(self, items: list[Any]) -> int:
        """Where the running turn's user message is in `items` (their end if nowhere)."""
        for at in range(len(items) - 1, -1, -1):
            item = items[at]
            parts = item.get("content") if item.get("role") == "user" else None
            said = "".join(p.get("text", "") for p in parts) if isinstance(parts, list) else parts
            if said == self.asking:
                return at
        return len(items)

    def _answered(self, headers: Any) -> None:
        super()._answered(headers)
        # The first answer after the client's compaction is where it landed: counted as a
        # compaction (unless the proxy compacted that request too, which it then names).
        pending, self._pending = self._pending, None
        if pending is not None and self.cell.applied[-1] == "none":
            self.cell.applied[-1] = f"client-{pending}"
