"""Real agent frameworks (the OpenAI Agents SDK, LangChain) and agent clients (Codex, Claude
Code, aider, opencode) through a running proxy.

Each test starts its own mock provider (playing a tool-calling model, with a small window),
a private redis-server when one is installed, and `compaction-proxy serve` as a process in
front, all on loopback sockets; then a framework runs a multi-turn agent session through it.
The frameworks and clients are optional: a module whose framework or client is not installed
is skipped. Where what the client sent matters (aider's files, opencode's rounds), a recording
relay between it and the proxy keeps each request as sent (relay.py).
"""
