"""Real agent frameworks (the OpenAI Agents SDK, LangChain) through a running proxy.

Each test starts its own mock provider (playing a tool-calling model, with a small window),
a private redis-server when one is installed, and `compaction-proxy serve` as a process in
front, all on loopback sockets; then a framework runs a multi-turn agent session through it.
The frameworks are optional: a module whose framework is not installed is skipped.
"""
