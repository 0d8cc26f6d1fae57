"""The mock as a model that uses `context_recall` (`MockUpstream(recaller=True)`), on chat
completions and the Responses API, whole and streamed, driven through its ASGI app.

Conversations are written as chat messages; `to_items` turns them into Responses items, so
each behaviour is checked on both APIs from the same conversation.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import httpx
import pytest

from proxy.adapters.tokenizer import Encoders, load_encoders
from proxy.core.messages import Message
from proxy.core.summary import summary_request
from proxy.core.tokens import O200K_BASE
from proxy.mock_upstream import AgentScript, MockUpstream, Reply
from tests.builders import assistant, assistant_calls, tool_result, user

Api = Literal["chat", "responses"]
JSON = dict[str, Any]

MODES = [
    pytest.param("chat", False, id="chat"),
    pytest.param("chat", True, id="chat-stream"),
    pytest.param("responses", False, id="responses"),
    pytest.param("responses", True, id="responses-stream"),
]
APIS = [pytest.param("chat", id="chat"), pytest.param("responses", id="responses")]

QUESTION = "What is the exact value of DEPLOY_TOKEN?"
DEPLOY_ID = "rc_a2b3c4d5e6"
# Spells "token", a word of the question: the id itself must not make its result look relevant.
APP_ID = "rc_token22222"
NOTE_ID = "rc_n2o3t4e5s6"
DEPLOY_ENV = "# deploy settings\nREGION=eu-west-1\nDEPLOY_TOKEN=tok_9f8e7d\n"


def cleared(tool: str, mentioned: str, rid: str) -> str:
    return (
        f"[tool result cleared to save context: {tool} returned 812 tokens here; "
        f'it mentioned {mentioned}; context_recall(id="{rid}") returns it]'
    )


def compacted(question: str = QUESTION) -> list[Message]:
    """A conversation the proxy compacted: a note for the oldest turns, then two cleared
    reads (config/deploy.env, then src/app.py), then the question."""
    return [
        user(f'[12 earlier messages omitted] context_recall(id="{NOTE_ID}") returns them.'),
        assistant("I will look at the configuration."),
        assistant_calls("c1", name="read_file", arguments={"path": "config/deploy.env"}),
        tool_result("c1", cleared("read_file", "config/deploy.env", DEPLOY_ID)),
        assistant_calls("c2", name="read_file", arguments={"path": "src/app.py"}),
        tool_result("c2", cleared("read_file", "src/app.py", APP_ID)),
        assistant("Both files are read."),
        user(question),
    ]


# --- driving the mock ----------------------------------------------------------------------


@dataclass(frozen=True)
class Move:
    """What the model answered: its text, and its calls as (call id, name, arguments)."""

    content: str | None
    calls: list[tuple[str, str, JSON]]

    @property
    def recalled(self) -> list[str]:
        return [arguments["id"] for _, name, arguments in self.calls if name == "context_recall"]


@pytest.fixture(scope="module")
def encoders() -> Encoders:
    return load_encoders((O200K_BASE,))


@pytest.fixture
def upstream(encoders: Encoders) -> MockUpstream:
    return MockUpstream(encoders=encoders, recaller=True)


def tools(api: Api, names: Sequence[str]) -> list[JSON]:
    schema = {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]}
    if api == "chat":
        return [
            {"type": "function", "function": {"name": name, "parameters": schema}} for name in names
        ]
    return [{"type": "function", "name": name, "parameters": schema} for name in names]


def to_items(messages: Sequence[Message], *, interleaved: bool = False) -> list[JSON]:
    """The conversation as Responses input items; with `interleaved`, each call's output
    comes right after it (as a client that answers call by call sends them)."""
    items: list[JSON] = []
    for message in messages:
        if message["role"] == "tool":
            output = {"call_id": message["tool_call_id"], "output": message["content"]}
            items.append({"type": "function_call_output", **output})
        elif message.get("tool_calls"):
            items.extend(
                {
                    "type": "function_call",
                    "call_id": call["id"],
                    "name": call["function"]["name"],
                    "arguments": call["function"]["arguments"],
                }
                for call in message["tool_calls"]
            )
        else:
            items.append({"role": message["role"], "content": message["content"]})
    return _interleave(items) if interleaved else items


def _interleave(items: list[JSON]) -> list[JSON]:
    outputs = {
        item["call_id"]: item for item in items if item.get("type") == "function_call_output"
    }
    ordered: list[JSON] = []
    for item in items:
        if item.get("type") == "function_call_output":
            continue
        ordered.append(item)
        if item.get("type") == "function_call" and item["call_id"] in outputs:
            ordered.append(outputs[item["call_id"]])
    return ordered


async def ask(
    upstream: MockUpstream,
    api: Api,
    messages: Sequence[Message],
    *,
    stream: bool = False,
    offered: Sequence[str] = ("read_file", "context_recall"),
    interleaved: bool = False,
) -> Move:
    """The mock's answer to `messages` over `api`, parsed from its JSON or its stream."""
    body: JSON = {"model": "mock-model", "tools": tools(api, offered), "stream": stream}
    if api == "chat":
        body["messages"] = list(messages)
    else:
        body["input"] = to_items(messages, interleaved=interleaved)
    transport = httpx.ASGITransport(app=upstream.app)
    async with httpx.AsyncClient(transport=transport, base_url="http://mock") as http:
        response = await http.post(
            f"/v1/{'chat/completions' if api == 'chat' else 'responses'}", json=body
        )
    assert response.status_code == 200, response.text
    if api == "chat":
        return chat_stream_move(response.text) if stream else chat_move(response.json())
    output = responses_stream_output(response.text) if stream else response.json()["output"]
    return responses_move(output)


def chat_move(completion: JSON) -> Move:
    message = completion["choices"][0]["message"]
    calls = [
        (call["id"], call["function"]["name"], json.loads(call["function"]["arguments"]))
        for call in message.get("tool_calls", [])
    ]
    return Move(message["content"], calls)


def chat_stream_move(text: str) -> Move:
    """The message a chat stream's deltas add up to."""
    content, calls = "", dict[int, JSON]()
    for line in text.splitlines():
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        for choice in json.loads(line.removeprefix("data: "))["choices"]:
            content += choice["delta"].get("content") or ""
            for delta in choice["delta"].get("tool_calls", []):
                call = calls.setdefault(delta["index"], {"id": None, "name": "", "arguments": ""})
                call["id"] = delta.get("id", call["id"])
                call["name"] += delta.get("function", {}).get("name", "")
                call["arguments"] += delta.get("function", {}).get("arguments", "")
    moves = [(c["id"], c["name"], json.loads(c["arguments"])) for _, c in sorted(calls.items())]
    return Move(content or None, moves)


def responses_stream_output(text: str) -> list[JSON]:
    """The output items a Responses stream closed, checked against its deltas and its end."""
    events = [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: ")]
    done = [event["item"] for event in events if event["type"] == "response.output_item.done"]
    for item in done:
        if item["type"] == "function_call":
            deltas = [
                event["delta"]
                for event in events
                if event["type"] == "response.function_call_arguments.delta"
                and event["item_id"] == item["id"]
            ]
            assert "".join(deltas) == item["arguments"]
    assert events[-1]["type"] == "response.completed"
    assert events[-1]["response"]["output"] == done
    return done


def responses_move(output: list[JSON]) -> Move:
    texts = [
        part["text"] for item in output if item["type"] == "message" for part in item["content"]
    ]
    calls = [
        (item["call_id"], item["name"], json.loads(item["arguments"]))
        for item in output
        if item["type"] == "function_call"
    ]
    return Move("".join(texts) if texts else None, calls)


def answered(move: Move, originals: dict[str, str]) -> list[Message]:
    """The round `move` made as the proxy appends it: its calls, then the archive's texts."""
    calls = [
        {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(a)}}
        for call_id, name, a in move.calls
    ]
    results = [
        tool_result(call_id, originals.get(arguments["id"], "nothing about deploys here"))
        for call_id, _, arguments in move.calls
    ]
    return [{"role": "assistant", "content": None, "tool_calls": calls}, *results]


# --- answering from what the request shows -------------------------------------------------


@pytest.mark.parametrize(("api", "stream"), MODES)
async def test_visible_value_is_answered(upstream: MockUpstream, api: Api, stream: bool) -> None:
    messages = compacted()
    messages[5] = tool_result("c2", "REGION=eu-west-1\nDEPLOY_TOKEN=tok_1a2b, rotated daily")
    move = await ask(upstream, api, messages, stream=stream)
    assert move == Move("DEPLOY_TOKEN is tok_1a2b.", [])
    assert (upstream.recall_answers, upstream.recall_calls) == (["DEPLOY_TOKEN is tok_1a2b."], 0)


async def test_colon_form_in_list_of_parts_content_is_answered(upstream: MockUpstream) -> None:
    parts = [{"type": "text", "text": "Settings:"}, {"type": "text", "text": "DEPLOY_TOKEN: x-77"}]
    messages = [{"role": "user", "content": parts}, assistant(), user(QUESTION)]
    move = await ask(upstream, "chat", messages)
    assert move.content == "DEPLOY_TOKEN is x-77."


async def test_newest_value_wins_and_longer_names_do_not_count(upstream: MockUpstream) -> None:
    messages = [
        user("DEPLOY_TOKEN=old"),
        assistant("noted"),
        user("DEPLOY_TOKEN=new; OLD_DEPLOY_TOKEN=older"),
        assistant("noted"),
        user(QUESTION),
    ]
    assert (await ask(upstream, "chat", messages)).content == "DEPLOY_TOKEN is new."


# --- recalling what a compaction took away -------------------------------------------------


@pytest.mark.parametrize(("api", "stream"), MODES)
async def test_absent_value_recalls_best_ranked_ids_first(
    upstream: MockUpstream, api: Api, stream: bool
) -> None:
    move = await ask(upstream, api, compacted(), stream=stream)
    # The read of config/deploy.env shares "deploy" with the question: it comes first. Then
    # the note, which stands for many messages, before the newer read of src/app.py (whose id
    # spells "token": the id alone must not make it look relevant); that waits for a later
    # round. Each call asks for the question's key as its query.
    assert move.content is None
    assert move.calls == [
        ("call_recall_1", "context_recall", {"id": DEPLOY_ID, "query": "DEPLOY_TOKEN"}),
        ("call_recall_2", "context_recall", {"id": NOTE_ID, "query": "DEPLOY_TOKEN"}),
    ]
    assert (upstream.recall_calls, upstream.recalled_ids) == (2, [DEPLOY_ID, NOTE_ID])
    assert upstream.recall_answers == []


@pytest.mark.parametrize(("api", "stream"), MODES)
async def test_recalled_value_is_answered(upstream: MockUpstream, api: Api, stream: bool) -> None:
    first = await ask(upstream, api, compacted(), stream=stream)
    messages = [*compacted(), *answered(first, {DEPLOY_ID: DEPLOY_ENV})]
    move = await ask(upstream, api, messages, stream=stream)
    assert move == Move("DEPLOY_TOKEN is tok_9f8e7d.", [])
    assert upstream.recall_answers == ["DEPLOY_TOKEN is tok_9f8e7d."]


@pytest.mark.parametrize("api", APIS)
async def test_next_round_recalls_only_ids_not_yet_recalled(
    upstream: MockUpstream, api: Api
) -> None:
    first = await ask(upstream, api, compacted())
    move = await ask(upstream, api, [*compacted(), *answered(first, {})])
    assert move.calls == [
        ("call_recall_3", "context_recall", {"id": APP_ID, "query": "DEPLOY_TOKEN"})
    ]


@pytest.mark.parametrize("api", APIS)
async def test_note_comes_before_unrelated_placeholders(upstream: MockUpstream, api: Api) -> None:
    # Nothing shares a word with the question (API_KEY has none of four letters): the note,
    # though oldest, comes before both cleared reads, then the newer read before the older.
    older, newer = "rc_o2l3d4e5r6", "rc_n2e3w4e5r6"
    messages = [
        user(f'[30 earlier messages omitted] context_recall(id="{NOTE_ID}") returns them.'),
        assistant_calls("c1", name="read_file", arguments={"path": "src/a.py"}),
        tool_result("c1", cleared("read_file", "src/a.py", older)),
        assistant_calls("c2", name="read_file", arguments={"path": "src/b.py"}),
        tool_result("c2", cleared("read_file", "src/b.py", newer)),
        assistant("Both files are read."),
        user("What is the value of API_KEY?"),
    ]
    move = await ask(upstream, api, messages)
    assert move.calls == [
        ("call_recall_1", "context_recall", {"id": NOTE_ID, "query": "API_KEY"}),
        ("call_recall_2", "context_recall", {"id": newer, "query": "API_KEY"}),
    ]
    again = await ask(upstream, api, [*messages, *answered(move, {})])
    assert again.calls == [("call_recall_3", "context_recall", {"id": older, "query": "API_KEY"})]


@pytest.mark.parametrize("api", APIS)
async def test_without_recall_tool_it_does_not_have_the_value(
    upstream: MockUpstream, api: Api
) -> None:
    move = await ask(upstream, api, compacted(), offered=("read_file",))
    assert move == Move("I do not have the value of DEPLOY_TOKEN.", [])
    assert upstream.recall_calls == 0


@pytest.mark.parametrize("api", APIS)
async def test_every_id_recalled_it_does_not_have_the_value(
    upstream: MockUpstream, api: Api
) -> None:
    first = await ask(upstream, api, compacted())
    messages = [*compacted(), *answered(first, {})]
    second = await ask(upstream, api, messages)
    move = await ask(upstream, api, [*messages, *answered(second, {})])
    assert move == Move("I do not have the value of DEPLOY_TOKEN.", [])


@pytest.mark.parametrize(("api", "interleaved"), [("chat", False), ("responses", True)])
async def test_gives_up_after_three_rounds(
    upstream: MockUpstream, api: Api, interleaved: bool
) -> None:
    reads = []
    for number in range(8):
        rid = f"rc_{'abcdefgh'[number] * 10}"
        reads += [
            assistant_calls(f"r{number}", name="read_file", arguments={"path": f"f{number}"}),
            tool_result(f"r{number}", cleared("read_file", f"f{number}", rid)),
        ]
    messages = [user("Read the files."), *reads, assistant("Read."), user(QUESTION)]
    rounds = []
    for _ in range(4):
        move = await ask(upstream, api, messages, interleaved=interleaved)
        rounds.append(len(move.calls))
        messages += answered(move, {})
    # Parallel calls are one round even when each output follows its own call in the items.
    assert rounds == [2, 2, 2, 0]
    assert move.content == "I do not have the value of DEPLOY_TOKEN."
    assert upstream.recall_calls == 6


async def test_rounds_count_again_from_the_next_user_message(upstream: MockUpstream) -> None:
    messages = [*compacted(), assistant_calls("x1", name="context_recall"), tool_result("x1")]
    messages += [assistant_calls("x2", name="context_recall"), tool_result("x2")]
    messages += [assistant_calls("x3", name="context_recall"), tool_result("x3")]
    gave_up = await ask(upstream, "chat", messages)
    assert gave_up.content == "I do not have the value of DEPLOY_TOKEN."
    again = await ask(upstream, "chat", [*messages, assistant(gave_up.content), user(QUESTION)])
    assert again.recalled == [DEPLOY_ID, NOTE_ID]


# --- requests that are not question turns ----------------------------------------------------


@pytest.mark.parametrize(("api", "stream"), MODES)
async def test_non_question_gets_the_usual_reply(
    upstream: MockUpstream, api: Api, stream: bool
) -> None:
    move = await ask(upstream, api, compacted("Deploy it, please."), stream=stream)
    assert move == Move("Hello from the mock upstream.", [])
    assert (upstream.recall_answers, upstream.recall_calls) == ([], 0)


async def test_non_question_goes_to_the_agent(encoders: Encoders) -> None:
    script = AgentScript(calls=(("read_file", '{"path": "a.py"}'),), rounds_per_turn=1)
    upstream = MockUpstream(encoders=encoders, recaller=True, agent=script)
    move = await ask(upstream, "chat", compacted("Deploy it, please."))
    assert move.calls == [("call_agent_1", "read_file", {"path": "a.py"})]
    asked = await ask(upstream, "chat", compacted())
    assert asked.recalled == [DEPLOY_ID, NOTE_ID]


async def test_queued_reply_comes_before_the_recaller(upstream: MockUpstream) -> None:
    upstream.queue(Reply(content="scripted"))
    assert (await ask(upstream, "chat", compacted())).content == "scripted"
    assert upstream.recall_answers == []


async def test_summary_request_is_summarized_not_answered(upstream: MockUpstream) -> None:
    # The transcript it asks about holds the question: still a summary, not a question turn.
    body = summary_request(compacted(), previous=None, model="mock-model", max_tokens=300)
    transport = httpx.ASGITransport(app=upstream.app)
    async with httpx.AsyncClient(transport=transport, base_url="http://mock") as http:
        response = await http.post("/v1/chat/completions", json=body)
    assert upstream.summary_calls == 1
    assert "DEPLOY_TOKEN is" not in response.json()["choices"][0]["message"]["content"]
    assert (upstream.recall_answers, upstream.recall_calls) == ([], 0)


async def test_off_by_default(encoders: Encoders) -> None:
    upstream = MockUpstream(encoders=encoders)
    assert (await ask(upstream, "chat", compacted())).content == "Hello from the mock upstream."
