# mypy: allow-untyped-decorators
# (Where LangChain is not installed, its decorator is untyped to mypy; this module is skipped.)
"""LangChain's `ChatOpenAI` through a running proxy that must compact.

`bind_tools` with three `@tool` tools whose results are large, and the tool loop an
application writes by hand: invoke, run the tool calls of the `AIMessage`, append a
`ToolMessage` for each, invoke again until the model answers; five user turns on one growing
message list. The model is the mock's script (four tool calls a turn, then an answer) in an
8,000-token window the conversation outgrows twice over. Run on chat completions (whole and
streamed) and on the Responses API (`use_responses_api=True`).
"""

# The imports below the optional package's check run only where it is installed.
# ruff: noqa: E402

from __future__ import annotations

from pathlib import Path

import pytest

from tests import optional

optional.module("langchain_openai", "pip install langchain-openai (make test installs it)")

# LangChain is optional: where it is missing, mypy sees Any and pytest skips this module.
from langchain_core.messages import (  # type: ignore[import-not-found, unused-ignore]
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.tools import BaseTool, tool  # type: ignore[import-not-found, unused-ignore]
from langchain_openai import ChatOpenAI  # type: ignore[import-not-found, unused-ignore]

from tests.clients import workload
from tests.clients.stack import Witness, assert_compacted_cleanly, running_stack
from tests.clients.workload import ToolLog

MAX_ROUNDS = 10
"""A bound on one turn's model calls, so that a model looping on its tools fails the test
instead of hanging it (the script needs five)."""


def tools_for(log: ToolLog) -> dict[str, BaseTool]:
    """The tools, by name, recording their runs in `log`."""

    @tool
    def read_file(path: str) -> str:
        """Read a file of the repository."""
        return workload.read_file(path, log.ran("read_file", path))

    @tool
    def run_tests(package: str) -> str:
        """Run the tests of a package and return the log."""
        return workload.run_tests(package, log.ran("run_tests", package))

    @tool
    def grep(pattern: str) -> str:
        """Search the repository for a pattern."""
        return workload.grep(pattern, log.ran("grep", pattern))

    return {t.name: t for t in (read_file, run_tests, grep)}


@pytest.mark.parametrize(
    ("streaming", "responses_api"),
    [(False, False), (True, False), (False, True)],
    ids=["chat", "chat-streamed", "responses"],
)
async def test_tool_loop_through_a_compacting_proxy(
    tmp_path: Path, streaming: bool, responses_api: bool
) -> None:
    script = workload.script(parallel=1)
    witness, log = Witness(), ToolLog()
    tools = tools_for(log)
    answers: list[object] = []
    with running_stack(tmp_path, script) as stack:
        async with witness.client() as http:
            model = ChatOpenAI(
                model=workload.MODEL,
                base_url=stack.base_url,
                api_key="sk-langchain",
                # No retries: any error the proxy causes must reach the loop, not be hidden.
                max_retries=0,
                http_async_client=http,
                streaming=streaming,
                use_responses_api=responses_api,
            )
            chat = model.bind_tools(list(tools.values()))
            messages: list[BaseMessage] = [SystemMessage(workload.INSTRUCTIONS)]
            for turn in range(workload.TURNS):
                witness.turn = turn
                log.start_turn()
                messages.append(HumanMessage(workload.user_message(turn)))
                for _ in range(MAX_ROUNDS):
                    reply = await chat.ainvoke(messages)
                    assert isinstance(reply, AIMessage)
                    messages.append(reply)
                    if not reply.tool_calls:
                        break
                    for call in reply.tool_calls:
                        output = await tools[call["name"]].ainvoke(call["args"])
                        messages.append(ToolMessage(output, tool_call_id=call["id"]))
                # `.text`: on the Responses API the content is a list of blocks.
                answers.append(reply.text)
        await assert_compacted_cleanly(stack, witness, log, answers, script)
    print(f"langchain {streaming=} {responses_api=} ({stack.store}): {witness.summary()}")
