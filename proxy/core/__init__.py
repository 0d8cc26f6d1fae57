"""The sans-I/O core: decisions about requests and conversations, as pure functions.

Rule 1: nothing here performs I/O or reads ambient state. No httpx, aiohttp, redis, fastapi,
starlette, asyncio, clock or environment (a nested ruff config bans those imports), so every
function can be unit-tested and property-tested on plain data.

Rule 2: the client's JSON is kept as it came. The core reads views over the raw dicts and hands
the original objects back, so fields the proxy does not know survive the round trip.

The service (`proxy/service.py`) performs what the core decides.
"""
