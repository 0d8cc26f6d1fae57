# mypy: allow-untyped-decorators
# (Where the SDK is not installed, its decorator is untyped to mypy; this module is skipped.)
"""The OpenAI Agents SDK through a running proxy that must compact, on both of its model APIs.

An `Agent` with three `@function_tool` tools whose results are large runs five user turns
(`Runner.run`, or `Runner.run_streamed`), each turn's input being the previous result's
`to_input_list()` plus the new user message, as the SDK documents multi-turn runs. The model
is the mock's script: four tool calls a turn, then an answer, in an 8,000-token window that
the conversation outgrows twice over, so the proxy compacts within runs and across turns.
"""

# The imports below the optional package's check run only where it is installed.
# ruff: noqa: E402

from __future__ import annotations

from pathlib import Path
from typing import Literal

import pytest

from tests import optional

optional.module("agents", "pip install openai-agents (make test installs it)")

import openai

# The SDK is optional: where it is missing, mypy sees Any and pytest skips this module.
from agents import (  # type: ignore[import-not-found, unused-ignore]
    Agent,
    Model,
    OpenAIChatCompletionsModel,
    OpenAIResponsesModel,
    RunContextWrapper,
    Runner,
    RunResult,
    RunResultStreaming,
    Tool,
    TResponseInputItem,
    function_tool,
    set_tracing_disabled,
)

from tests.clients import workload
from tests.clients.stack import Witness, assert_compacted_cleanly, running_stack
from tests.clients.workload import ToolLog

# The SDK sends traces to OpenAI by default: there is no network here, and nothing to trace.
set_tracing_disabled(True)

Api = Literal["chat_completions", "responses"]


# The tools get the run's `ToolLog` through the SDK's run context, as an application would
# pass its own state: each test counts its own runs.
@function_tool
def read_file(ctx: RunContextWrapper[ToolLog], path: str) -> str:
    """Read a file of the repository."""
    return workload.read_file(path, ctx.context.ran("read_file", path))


@function_tool
def run_tests(ctx: RunContextWrapper[ToolLog], package: str) -> str:
    """Run the tests of a package and return the log."""
    return workload.run_tests(package, ctx.context.ran("run_tests", package))


@function_tool
def grep(ctx: RunContextWrapper[ToolLog], pattern: str) -> str:
    """Search the repository for a pattern."""
    return workload.grep(pattern, ctx.context.ran("grep", pattern))


TOOLS: list[Tool] = [read_file, run_tests, grep]


def model_for(api: Api, client: openai.AsyncOpenAI) -> Model:
    if api == "responses":
        return OpenAIResponsesModel(workload.MODEL, client)
    return OpenAIChatCompletionsModel(workload.MODEL, client)


async def streamed(
    agent: Agent[ToolLog], items: list[TResponseInputItem], tools: ToolLog
) -> RunResultStreaming:
    """`Runner.run_streamed`, its events consumed as an app showing progress would."""
    result = Runner.run_streamed(agent, items, context=tools)
    called = outputs = 0
    async for event in result.stream_events():
        if event.type == "run_item_stream_event":
            called += event.name == "tool_called"
            outputs += event.name == "tool_output"
    # The stream showed each of the turn's tool calls and outputs, once.
    assert called == outputs == len(tools.turns[-1]), (called, outputs, tools.turns[-1])
    return result


@pytest.mark.parametrize("api", ["chat_completions", "responses"])
@pytest.mark.parametrize(
    ("mode", "parallel"),
    # Streamed runs get two calls per round: the SDK runs parallel tool calls too.
    [("run", 1), ("run_streamed", 2)],
)
async def test_agent_runs_turns_through_a_compacting_proxy(
    tmp_path: Path, api: Api, mode: str, parallel: int
) -> None:
    script = workload.script(parallel=parallel)
    witness, tools = Witness(), ToolLog()
    answers: list[object] = []
    with running_stack(tmp_path, script) as stack:
        async with (
            witness.client() as http,
            openai.AsyncOpenAI(
                # No retries: any error the proxy causes must reach the run, not be hidden.
                base_url=stack.base_url,
                api_key="sk-agents",
                http_client=http,
                max_retries=0,
            ) as client,
        ):
            agent = Agent[ToolLog](
                name="coder",
                instructions=workload.INSTRUCTIONS,
                tools=TOOLS,
                model=model_for(api, client),
            )
            items: list[TResponseInputItem] = []
            for turn in range(workload.TURNS):
                witness.turn = turn
                tools.start_turn()
                items.append({"role": "user", "content": workload.user_message(turn)})
                result: RunResult | RunResultStreaming
                if mode == "run_streamed":
                    result = await streamed(agent, items, tools)
                else:
                    result = await Runner.run(agent, items, context=tools)
                answers.append(result.final_output)
                items = result.to_input_list()
        await assert_compacted_cleanly(stack, witness, tools, answers, script)
    print(f"agents {api} {mode} ({stack.store}): {witness.summary()}, tool runs {tools.total}")
