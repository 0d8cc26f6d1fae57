"""`make demo`: the proxy at work in a minute, with no API key and no network.

A mock OpenAI-compatible provider with a small window, the proxy in front of it, and a few
simulated agents running long tool-using sessions through it with the official OpenAI SDK,
all in one process. The terminal shows each turn as the proxy saw it (session, pressure,
what it compacted), then what each agent sent against what reached the provider; the proxy
keeps serving, with its dashboard, until Ctrl-C.

With `--api responses` (or `both`: half of them) the agents speak the Responses API as
Codex does, statelessly, to a mock reasoning model that wants its encrypted reasoning back.

Modules: `workload` (what the agents do), `agents` (the SDK clients; `responses_agent` for
the Responses API), `streams` (a stream added up), `accounting` (the provider's side of the
bill), `display` (what is printed), `servers` (uvicorn on the demo's sockets), `runner` (the
wiring), `options` and `command` (the command line). Only `options` is imported by the CLI
up front: the rest needs the `openai` package, which `command` checks for first.
"""
