"""Cache breakpoints on a Messages body the proxy forwards: the client's, and at most four.

`cache_control` marks where the provider caches the prompt's prefix. The conversation the
core compacts carries none (`proxy.core.anthropic` takes them out, so that a message is the
same message whichever block the client marks this time); the request's own markers are
kept apart as `[stripped, original, source]` triples and put back here:

- on the very block of this request each was on (the block forwarded unchanged), or on the
  result the core rebuilt from that block (a trimmed tool result keeps its marker);
- a message forwarded from a checkpoint that equals one of the request's messages holding a
  marker is that message: the request's own is forwarded in its place (the latest copy),
  so its markers are found. An equal block in another message is not taken for the marked
  one: it may be another block, which the client did not mark;
- a block the core dropped loses its marker with it.

The API refuses more than `MAX_BREAKPOINTS` markers in a request. Past four, the earliest
go, in prompt order (tools, system, messages): a later breakpoint caches a longer prefix,
the one an agent's next request reads from, and the client's newest (its last message's)
is the one that must stay where the client put it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Final

MAX_BREAKPOINTS: Final = 4

Path = tuple[str | int, ...]


class Marks:
    """The request's marked blocks, for writing one body (each marker is placed once)."""

    def __init__(self, triples: Sequence[Sequence[Any]]) -> None:
        self._triples = [tuple(triple) for triple in triples]
        self._index: dict[int, int] = {}
        for index, (stripped, _, source) in enumerate(self._triples):
            self._index[id(stripped)] = index
            if source is not None:
                self._index[id(source)] = index
        self._used: set[int] = set()

    def _find(self, value: object, position: int) -> int | None:
        index = self._index.get(id(value))
        if index is None or index in self._used or self._triples[index][position] is not value:
            return None
        return index

    def rebuilt(self, source: object, block: dict[str, Any]) -> Any:
        """`block`, rebuilt from `source` (a tool message's), with its marker: the original
        when nothing changed, else the new block with the original's `cache_control`."""
        index = self._find(source, 2)
        if index is None:
            return block
        self._used.add(index)
        stripped, original, _ = self._triples[index]
        if block == stripped:
            return original
        if "cache_control" not in original:
            return block  # only its inner blocks were marked, and its content is new
        return {**block, "cache_control": original["cache_control"]}

    def current(self, forwarded: Sequence[Any], owners: Sequence[Any]) -> list[Any]:
        """`forwarded` with a checkpoint's copy of an owner (a message of the request that
        holds a marked block, see `holds`) replaced by the owner itself, so that its blocks
        are found: the latest copy, once. Only a whole equal message stands for the
        request's: an equal block elsewhere may be another one, which the client did not
        mark."""
        out = list(forwarded)
        taken: set[int] = set()
        for index in range(len(out) - 1, -1, -1):
            message = out[index]
            for owner in owners:
                if id(owner) not in taken and (message is owner or message == owner):
                    out[index] = owner
                    taken.add(id(owner))
                    break
        return out

    def holds(self, values: Iterable[object]) -> bool:
        """Whether any of `values` (a message's blocks) is a marked block or its source."""
        return any(id(value) in self._index for value in values)

    def restored(self, body: dict[str, Any]) -> dict[str, Any]:
        """`body` with every marker not yet placed back on its very block."""
        for path, block in list(_top_blocks(body)):
            index = self._find(block, 0)
            if index is not None:
                self._used.add(index)
                body = _set(body, path, self._triples[index][1])
        return body


def _top_blocks(body: Mapping[str, Any]) -> Iterator[tuple[Path, Any]]:
    """Every block of `system` and of the messages' content, with where it is."""
    system = body.get("system")
    if isinstance(system, list):
        yield from ((("system", i), block) for i, block in enumerate(system))
    messages = body.get("messages")
    for i, message in enumerate(messages if isinstance(messages, list) else ()):
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list):
            yield from ((("messages", i, "content", j), b) for j, b in enumerate(content))


def breakpoints(body: Mapping[str, Any]) -> list[Path]:
    """Where `body` has cache breakpoints, in prompt order: tools, system, then each
    message's blocks (a tool result's inner blocks before the result itself)."""
    found: list[Path] = []
    tools = body.get("tools")
    for i, tool in enumerate(tools if isinstance(tools, list) else ()):
        if _marked(tool):
            found.append(("tools", i))
    for path, block in _top_blocks(body):
        inner = block.get("content") if isinstance(block, dict) else None
        if isinstance(inner, list):
            found += [(*path, "content", k) for k, item in enumerate(inner) if _marked(item)]
        if _marked(block):
            found.append(path)
    return found


def limited(body: dict[str, Any], most: int = MAX_BREAKPOINTS) -> dict[str, Any]:
    """`body` with at most `most` breakpoints: the earliest beyond them are taken out."""
    found = breakpoints(body)
    for path in found[: max(0, len(found) - most)]:
        body = _set(body, path, None)
    return body


def _marked(value: object) -> bool:
    return isinstance(value, dict) and value.get("cache_control") is not None


def _set(value: Any, path: Path, new: Any) -> Any:
    """A copy of `value` with the item at `path` replaced by `new` (by itself without its
    `cache_control` when `new` is None); only the containers on the path are copied."""
    if not path:
        return {k: v for k, v in value.items() if k != "cache_control"} if new is None else new
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        return {**value, head: _set(value[head], rest, new)}
    copy = list(value)
    copy[head] = _set(value[head], rest, new)  # type: ignore[index]
    return copy
