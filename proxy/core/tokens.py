"""Token accounting: how many prompt tokens a chat completion request costs its provider.

This module owns the counting rules: the framing around each message, names, text, images,
audio and files, tool calls, the declared tool schemas, and which encoding a model family
uses. It never loads an encoding: a `TextEncoder` is passed in (tiktoken, loaded once at the
edge by `proxy/adapters/tokenizer.py`, or the `ApproximateEncoder` here when it cannot load).

Counts aim at what the provider reports as `usage.prompt_tokens`, and err high where the
provider's rule is unknown: an underestimate sends a request that overflows, an overestimate
only compacts a little early (and the calibration against `usage` corrects a steady bias).
Sources of the constants:

- message framing, names and reply priming: OpenAI cookbook, "How to count tokens with
  tiktoken" (`tokens_per_message = 3`, `tokens_per_name = 1`, `+3` for
  `<|start|>assistant<|message|>`), whose totals match the API's `prompt_tokens`;
- per-tool and tools framing: the same notebook's `num_tokens_for_tools` (`func_init = 7`,
  `func_end = 12`);
- images: OpenAI's vision guide, tile method (85 at low detail, else 85 + 170 per 512-px tile);
- audio: OpenAI bills user audio at 1 token per 100 ms.

Counting costs grow with a request's new messages, not its history: a message's count is
cached under a hash of its canonical JSON, which is several times cheaper than encoding it
(`python -m bench.tokens` measures both).

Huge texts are never encoded. Byte-level BPE (o200k_base, cl100k_base) makes at most one
token of each UTF-8 byte, so a text's byte length is a count that can never be too low;
it is used above `EXACT_MAX_BYTES`, where encoding would cost seconds (a 10 MB text with no
whitespace takes tiktoken 5 s) and the text overflows every common window either way. Texts
of `LARGE_TEXT_CHARS` or more have their counts remembered by hash: the service counts a
large request's new messages in a worker thread (`count_apart`, then `remember`), and the
plan's later counts of the same texts find them there. It plans a large request in a worker
thread too, with a counter of its own (`apart`, then `merge`).
"""

from __future__ import annotations

import base64
import copy
import json
import math
import re
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol

from proxy.core.anthropic_count import BLOCK, block_tokens
from proxy.core.digests import Digests, digest
from proxy.core.messages import leading_instructions, role, text, tool_calls
from proxy.core.responses import ATTACHED


class TextEncoder(Protocol):
    """Counts the tokens of plain text in one encoding."""

    @property
    def name(self) -> str:
        """The encoding's name (`o200k_base`), or `approximate` for the fallback."""
        ...

    def count(self, text: str) -> int:
        """Tokens in `text`; text that looks like a special token counts as ordinary text."""
        ...


# Pieces cut roughly as tiktoken's own pre-tokenizer cuts text: words split at case changes
# (camelCase is two tokens), digit groups of up to three, runs of non-ASCII characters,
# single ASCII punctuation marks and control characters, and the whitespace tiktoken keeps
# as tokens of its own (before digits, line breaks, indentation). A single space before a
# word or a mark is absorbed by it, as in tiktoken.
_PIECES: Final = re.compile(
    r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|[0-9]{1,3}|[^\x00-\x7f]+|[^\sA-Za-z0-9\x80-\U0010ffff]"
    r"|\s+(?=[0-9])|\s*\n\s*|\s{2,}"
)


@dataclass(frozen=True, slots=True)
class ApproximateEncoder:
    """The fallback when no tiktoken encoding can be loaded: a count that errs high.

    A flat `bytes / 4` is right for English prose but undercounts what agents send most:
    JSON and logs run at about 2.3 bytes per token, CJK at 2.8 (cl100k). Counting pieces the
    way tiktoken's pre-tokenizer cuts them does better: a word costs one token per four
    letters (rounded up), a digit group or punctuation mark one, a non-ASCII run one per
    2.5 bytes, a whitespace run one per eight characters. Measured against cl100k_base and
    o200k_base this is 1.1-1.7x the true count on prose, code, JSON, HTML, logs, CJK and
    European languages; it undercounts only random noise such as base64 (0.8x) and emoji.
    """

    name: str = "approximate"

    def count(self, text: str) -> int:
        """An estimate of `text`'s tokens, usually above tiktoken's count."""
        # One match at a time (not `findall`): in a worker thread, the event loop gets the
        # GIL back between matches instead of waiting for the whole text.
        return sum(_piece_tokens(match.group()) for match in _PIECES.finditer(text))


def _piece_tokens(piece: str) -> int:
    first = piece[0]
    if not first.isascii():
        # "surrogatepass": a lone surrogate from a JSON "\ud800" escape must not raise.
        return -(-2 * len(piece.encode("utf-8", "surrogatepass")) // 5)
    if first.isalpha():
        return (len(piece) + 3) // 4
    if first.isspace():
        return (len(piece) + 7) // 8
    return 1


O200K_BASE: Final = "o200k_base"
CL100K_BASE: Final = "cl100k_base"
APPROXIMATE: Final = "approximate"
"""Not a tiktoken encoding: `ApproximateEncoder`, for model families with no public
tokenizer (Claude), whose counts run above o200k_base's (the encoder errs high there too)."""
DEFAULT_ENCODING: Final = O200K_BASE
"""Unknown models get the newest OpenAI encoding: most new models are counted closest by it."""

ENCODINGS: Final[tuple[tuple[str, str], ...]] = (
    # The first matching prefix wins, so gpt-4o and gpt-4.1 come before gpt-4. A prefix
    # matches the whole name or up to a separator: "o1" matches "o1-mini", not "o1x".
    ("gpt-4o", O200K_BASE),
    ("chatgpt-4o", O200K_BASE),
    ("gpt-4.1", O200K_BASE),
    ("gpt-4.5", O200K_BASE),
    ("gpt-5", O200K_BASE),
    ("o1", O200K_BASE),
    ("o3", O200K_BASE),
    ("o4", O200K_BASE),
    ("gpt-4", CL100K_BASE),
    ("gpt-3.5", CL100K_BASE),
    ("gpt-35", CL100K_BASE),  # Azure's spelling of gpt-3.5
    ("text-embedding-3", CL100K_BASE),
    ("text-embedding-ada", CL100K_BASE),
    ("claude", APPROXIMATE),
)
"""Model-name prefixes and the tiktoken encoding of each family."""


def encoding_for_model(model: str | None) -> str:
    """The tiktoken encoding name for `model`; `DEFAULT_ENCODING` when the family is unknown.

    Provider prefixes (`openai/gpt-4o`, `azure/gpt-4`), fine-tune prefixes (`ft:gpt-4o-...`),
    dated suffixes (`gpt-4o-2024-08-06`) and letter case do not change the answer.
    """
    name = _base_name(model or "")
    for prefix, encoding in ENCODINGS:
        if name.startswith(prefix) and (
            len(name) == len(prefix) or not name[len(prefix)].isalnum()
        ):
            return encoding
    return DEFAULT_ENCODING


def _base_name(model: str) -> str:
    name = model.lower().rsplit("/", 1)[-1]
    return name.removeprefix("ft:")


MESSAGE_TOKENS: Final = 3
"""Framing around every message: `<|start|>{role}<|message|>...<|end|>` (cookbook)."""
NAME_TOKENS: Final = 1
"""A message's `name` costs its text plus this (cookbook `tokens_per_name`)."""
REPLY_TOKENS: Final = 3
"""Every request primes the reply with `<|start|>assistant<|message|>` (cookbook)."""
TOOL_CALL_TOKENS: Final = 3
"""Framing per tool call beyond its name and arguments. An estimate: a measured gpt-4
request with one call and its result (openai-java issue #5: 35 prompt tokens) counts 37."""
TOOL_TOKENS: Final = 7
"""Framing per declared tool or schema (cookbook `func_init` for gpt-4o)."""
TOOLS_TOKENS: Final = 12
"""Framing once per request that declares tools (cookbook `func_end`)."""

IMAGE_LOW_TOKENS: Final = 85
IMAGE_TILE_TOKENS: Final = 170
IMAGE_HIGH_TOKENS: Final = IMAGE_LOW_TOKENS + IMAGE_TILE_TOKENS * 8
"""An image at high or auto detail whose size is unknown: the most the tile method can cost
(fit in 2048 px, short side 768 px: at most 2 x 4 tiles), so it never undercounts there."""

AUDIO_TOKENS_PER_SECOND: Final = 10
_AUDIO_BYTES_PER_SECOND: Final[Mapping[str, int]] = {
    # Low byte rates, so durations (and tokens) err long: 16 kHz 16-bit mono PCM, 64 kbit/s MP3.
    "wav": 32_000,
    "pcm16": 32_000,
    "mp3": 8_000,
}
_AUDIO_DEFAULT_BYTES_PER_SECOND: Final = 8_000

FILE_TOKENS: Final = 1_600
"""A `file` part (a PDF by id or by data): the proxy cannot see inside, so this is one page's
worth (its text and its page image). Large documents exceed it; calibration and the
overflow handling correct what this misses."""

REASONING_ITEM_TOKENS: Final = 4
"""Framing per Responses API `reasoning` item, as per message."""
ENCRYPTED_CHARS_PER_TOKEN: Final = 16 / 3
"""A reasoning item's `encrypted_content` is the base64 of its encrypted reasoning: 4
characters per 3 bytes, and about 4 bytes per token of reasoning. Priced as its compact JSON
instead, it would count some three times that; and OpenAI does not even count the reasoning
of turns before the last user message, so this still errs high there."""

EXACT_MAX_BYTES: Final = 4 * 1024 * 1024
"""Texts longer than this in UTF-8 count as their byte length, never encoded: 4 MiB is over
4 million tokens, beyond the largest common windows, and prose that long is a million."""
LARGE_TEXT_CHARS: Final = 16 * 1024
"""Texts at least this long have their counts cached by hash (hashing is a small fraction
of encoding them), so a count made in a worker thread serves the later ones."""
_TEXT_CACHE_SIZE: Final = 1_024
SHORT_TEXT_CHARS: Final = 256
"""Texts shorter than `LARGE_TEXT_CHARS` have their counts cached too: by the text itself
when shorter than this, by its hash when longer. A compaction counts its ledger's
statements, its trail's names, its summary's lines and the previous summary one by one,
the same texts at every compaction and preparation of a conversation: a dict lookup (or a
hash, a small fraction of encoding) instead of a call into the encoder."""
_KNOWN_CACHE_SIZE: Final = 65_536

_ROLES: Final = frozenset({"system", "developer", "user", "assistant", "tool", "function"})
_PNG_DATA_URL: Final = "data:image/png;base64,"
_PNG_SIGNATURE: Final = b"\x89PNG\r\n\x1a\n"


class TokenCounter:
    """Counts a request's prompt tokens in one encoding, caching each message's count.

    Keep one counter per encoding for the life of the process: the cache is what makes a
    long conversation cheap to count again on its next turn. `cache_size` bounds the number
    of remembered messages and schemas (least recently used go first; 0 disables caching).
    Not thread-safe: share a counter within one event loop, not across threads; only
    `count_apart` and a counter made by `apart` may run in another thread.
    """

    def __init__(
        self,
        encoder: TextEncoder,
        *,
        cache_size: int = 65_536,
        exact_max_bytes: int = EXACT_MAX_BYTES,
    ) -> None:
        self.encoder = encoder
        self._cache_size = cache_size
        self._exact_max_bytes = exact_max_bytes
        self._cache: OrderedDict[bytes, int] = OrderedDict()
        self._texts: OrderedDict[bytes, int] = OrderedDict()
        self._known: dict[str | bytes, int] = {}
        self._roles: dict[str, int] = {}
        self._digests: Digests | None = None
        self._digest: Callable[[object], bytes] = digest
        self._parent: TokenCounter | None = None

    def for_request(self, digests: Digests) -> TokenCounter:
        """This counter (the same cache) taking message digests from `digests`: one request's
        messages are then hashed once for counting, chain hashes and the archive alike."""
        keyed = copy.copy(self)
        keyed._digests = digests
        keyed._digest = digests.of
        return keyed

    def apart(self) -> TokenCounter:
        """A counter for one piece of work in a worker thread, such as a plan: it writes
        what it counts into tables of its own (and a copy of the request's digests), and
        looks up what it does not know in this counter's tables. Pass it to `merge`
        afterwards, on this counter's own thread.

        Only the work's own thread writes its tables, only this counter's thread writes
        this one's. A lookup here is one `dict.get`, which CPython runs whole under the
        GIL while the other thread changes the table: it sees the table before or after
        each change, never during one. So the thread finds every count made before (the
        placeholders and cut results of earlier plans included, which a copy of the input
        messages' counts alone missed: every plan in a thread counted them anew), and
        nothing is copied on the calling thread.
        """
        apart = copy.copy(self)
        apart._parent = self
        apart._cache = OrderedDict()
        apart._texts = OrderedDict()
        apart._known = {}
        apart._roles = dict(self._roles)
        if self._digests is not None:
            apart._digests = self._digests.copy()
            apart._digest = apart._digests.of
        return apart

    def merge(self, apart: TokenCounter) -> None:
        """Cache what a counter made by `apart` knows, its new counts included (and its new
        digests, when both serve one request)."""
        self.remember(Counted(apart._cache, apart._texts))
        for key, tokens in apart._known.items():
            self._remember_known(key, tokens)
        if self._digests is not None and apart._digests is not None:
            self._digests.update(apart._digests)

    def text(self, text: str) -> int:
        """Tokens of plain text (cached, see `SHORT_TEXT_CHARS` and `LARGE_TEXT_CHARS`)."""
        if len(text) >= LARGE_TEXT_CHARS:
            return self._encode(text)
        key: str | bytes = text if len(text) < SHORT_TEXT_CHARS else digest(text)
        tokens = self._known.get(key)
        if tokens is None and self._parent is not None:
            tokens = self._parent._known.get(key)
        if tokens is None:
            tokens = self.encoder.count(text)
            self._remember_known(key, tokens)
        return tokens

    def _remember_known(self, key: str | bytes, tokens: int) -> None:
        if len(self._known) >= _KNOWN_CACHE_SIZE:
            # The oldest entry goes (dicts keep insertion order): cheaper than an LRU's
            # bookkeeping on every hit, and a conversation's texts come back together.
            del self._known[next(iter(self._known))]
        self._known[key] = tokens

    def message(self, message: Mapping[str, Any]) -> int:
        """Tokens of one message, framing included; malformed messages count without raising."""
        return self._cached(b"m", message, self._count_message)

    def messages(self, messages: Iterable[Mapping[str, Any]]) -> int:
        """Tokens of a message list: each message plus the reply priming."""
        return sum(self.message(message) for message in messages) + REPLY_TOKENS

    def at_most(self, messages: Iterable[Any]) -> int | None:
        """An upper bound of `messages(messages)` made without encoding anything: each
        message's cached count, or for one not counted yet its strings' UTF-8 bytes and its
        framing (a BPE token is a byte or more). None when a message not counted yet holds
        anything but text (parts, media, a value where a string belongs), whose count its
        bytes do not bound, or when this counter's encoder is not a BPE one."""
        if self.encoder.name == APPROXIMATE:
            return None
        total = REPLY_TOKENS
        for message in messages:
            tokens = self._cache.get(b"m" + self._digest(message))
            if tokens is None:
                tokens = _bytes_bound(message)
                if tokens is None:
                    return None
            total += tokens
        return total

    def tools(self, body: Mapping[str, Any]) -> int:
        """Tokens of the schemas a request declares, which providers render into the prompt.

        The schemas are `tools`, legacy `functions` and a `response_format` JSON schema, all
        fixed costs. Each counts as its compact JSON plus `TOOL_TOKENS`, plus `TOOLS_TOKENS`
        once. Compact JSON spells out structure the provider's rendering abbreviates, so
        this errs high: the cookbook's weather example counts 130 here, 101 (gpt-4o) and 105
        (gpt-4) by the API.
        """
        schemas = _schemas(body)
        if not schemas:
            return 0
        return TOOLS_TOKENS + sum(self._cached(b"s", s, self._count_schema) for s in schemas)

    def request(self, body: Mapping[str, Any]) -> int:
        """Tokens of a whole chat completion body: its messages and its schemas."""
        return self.messages(_messages(body)) + self.tools(body)

    def fixed_overhead(self, body: Mapping[str, Any]) -> int:
        """Tokens compaction can never remove: leading instructions, reply priming, schemas.

        The leading instructions are the system and developer messages before anything else;
        `request(body) - fixed_overhead(body)` is what the rest of the conversation costs.
        """
        messages = _messages(body)
        return self.messages(messages[: leading_instructions(messages)]) + self.tools(body)

    def unknown(self, messages: Iterable[Any]) -> list[tuple[bytes, Any]]:
        """The messages whose counts are not cached, each with its cache key."""
        keyed = ((b"m" + self._digest(message), message) for message in messages)
        return [(key, message) for key, message in keyed if key not in self._cache]

    def count_apart(self, pending: Iterable[tuple[bytes, Any]]) -> Counted:
        """Counts of `unknown`'s messages, made without touching this counter's caches.

        Safe to run in a worker thread while the counter serves other requests; pass the
        result to `remember` back on the counter's own thread.
        """
        apart = TokenCounter(self.encoder, cache_size=0, exact_max_bytes=self._exact_max_bytes)
        counts = {key: apart._count_message(message) for key, message in pending}
        return Counted(counts, dict(apart._texts))

    def remember(self, counted: Counted) -> None:
        """Cache what `count_apart` counted."""
        for key, tokens in counted.messages.items():
            _store(self._cache, key, tokens, self._cache_size)
        for key, tokens in counted.texts.items():
            _store(self._texts, key, tokens, _TEXT_CACHE_SIZE)

    def _encode(self, text: str) -> int:
        if len(text) < LARGE_TEXT_CHARS:
            return self.encoder.count(text)
        size = utf8_size(text)
        if size > self._exact_max_bytes:
            return size  # at most one token per byte: never too low
        key = digest(text)
        tokens = self._texts.get(key)
        if tokens is None and self._parent is not None:
            tokens = self._parent._texts.get(key)
        if tokens is None:
            tokens = self.encoder.count(text)
        _store(self._texts, key, tokens, _TEXT_CACHE_SIZE)
        return tokens

    def _cached(self, kind: bytes, value: Any, count: Callable[[Any], int]) -> int:
        # The key hashes the value's canonical JSON: equal messages share an entry however
        # their keys are ordered, and `kind` keeps a message and an equal schema apart.
        key = kind + self._digest(value)
        cache = self._cache
        tokens = cache.get(key)
        if tokens is not None:
            cache.move_to_end(key)
            return tokens
        if self._parent is not None:
            tokens = self._parent._cache.get(key)
            if tokens is not None:
                return tokens
        tokens = count(value)
        _store(cache, key, tokens, self._cache_size)
        return tokens

    def _count_message(self, message: Any) -> int:
        if not isinstance(message, Mapping):
            return MESSAGE_TOKENS + self._value(message)
        tokens = MESSAGE_TOKENS + self._role(role(message)) + self._encode(text(message))
        tokens += self._content_extras(message.get("content"))
        if "name" in message:
            tokens += NAME_TOKENS + self._value(message["name"])
        tokens += sum(self._tool_call(call) for call in tool_calls(message))
        tokens += self._function_call(message.get("function_call"))
        return tokens + self._value(message.get("refusal"))

    def _role(self, name: str) -> int:
        # The few standard roles are encoded once, so a new message costs one encode.
        tokens = self._roles.get(name)
        if tokens is None:
            tokens = self.encoder.count(name)
            if name in _ROLES:
                self._roles[name] = tokens
        return tokens

    def _content_extras(self, content: object) -> int:
        """What `text()` leaves out of the content: media parts and anything unexpected."""
        if content is None or isinstance(content, str):
            return 0
        if isinstance(content, list):
            return sum(self._part(part) for part in content)
        return self._value(content)

    def _part(self, part: object) -> int:
        if not isinstance(part, dict):
            return self._value(part)
        if isinstance(part.get("text"), str):
            return 0  # counted with the message's text
        kind = part.get("type")
        if kind == "image_url":
            return _image_part_tokens(part)
        if kind == "input_audio":
            return _audio_part_tokens(part)
        if kind == "file":
            return FILE_TOKENS
        if kind == "refusal" and "refusal" in part:
            return self._value(part["refusal"])
        if kind == ATTACHED and _is_reasoning(part.get("item")):
            return self._reasoning(part["item"])
        if kind == BLOCK:
            # A Messages API block (`proxy.core.anthropic`): images, documents, thinking.
            return block_tokens(part.get("block"), self._value)
        # An unknown part type counts as its JSON: some cost, rather than none.
        return self._value(part)

    def _reasoning(self, item: Mapping[str, Any]) -> int:
        """A Responses API reasoning item: its summary and visible reasoning as text, and
        the reasoning its ciphertext holds (`ENCRYPTED_CHARS_PER_TOKEN`)."""
        tokens = REASONING_ITEM_TOKENS
        for field in ("summary", "content"):
            parts = item.get(field)
            if isinstance(parts, list):
                tokens += self._encode(text({"content": parts})) + self._content_extras(parts)
            elif parts is not None:
                tokens += self._value(parts)
        encrypted = item.get("encrypted_content")
        if isinstance(encrypted, str):
            tokens += math.ceil(len(encrypted) / ENCRYPTED_CHARS_PER_TOKEN)
        elif encrypted is not None:
            tokens += self._value(encrypted)
        return tokens

    def _tool_call(self, call: Mapping[str, Any]) -> int:
        function = call.get("function")
        if isinstance(function, dict):
            return self._function_call(function)
        # A custom tool call, or a malformed one: count what it carries.
        return TOOL_CALL_TOKENS + self._value(call)

    def _function_call(self, function: object) -> int:
        if function is None:
            return 0
        if not isinstance(function, dict):
            return TOOL_CALL_TOKENS + self._value(function)
        name, arguments = function.get("name"), function.get("arguments")
        return TOOL_CALL_TOKENS + self._value(name) + self._value(arguments)

    def _count_schema(self, schema: object) -> int:
        return TOOL_TOKENS + self._value(schema)

    def _value(self, value: object) -> int:
        """A string's tokens, or a JSON value's compact serialization's; None costs nothing."""
        if value is None:
            return 0
        if isinstance(value, str):
            return self._encode(value)
        return self._encode(_compact(value))


@dataclass(frozen=True, slots=True)
class Counted:
    """Counts made by `TokenCounter.count_apart`, by cache key."""

    messages: Mapping[bytes, int]
    texts: Mapping[bytes, int]


def text_size(value: object) -> int:
    """The characters of the strings in a JSON value (a message): about what counting it
    costs, found without serializing it."""
    # A loop, with a dict told apart before the slower `Mapping` check: the service sizes
    # every message of a large request, which took twice as long recursively.
    size = 0
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            size += len(item)
        elif isinstance(item, (dict, Mapping)):
            for key, part in item.items():
                size += len(key)
                if isinstance(part, str):
                    size += len(part)
                else:
                    pending.append(part)
        elif isinstance(item, list):
            pending.extend(item)
    return size


def _bytes_bound(message: object) -> int | None:
    """At most what `TokenCounter.message` counts for a message of text alone, in a BPE
    encoding: its strings' UTF-8 bytes and every framing it may carry; None for any other
    message (see `TokenCounter.at_most`)."""
    if not isinstance(message, dict):
        return None
    content = message.get("content")
    if content is not None and not isinstance(content, str):
        return None
    strings = [role(message), content or ""]
    for key in ("name", "refusal"):
        value = message.get(key)
        if value is not None and not isinstance(value, str):
            return None
        strings.append(value or "")
    calls = tool_calls(message)
    functions = [call.get("function") for call in calls]
    if message.get("function_call") is not None:
        functions.append(message["function_call"])
    for function in functions:
        if not isinstance(function, dict):
            return None  # a custom call counts as its JSON, which may be escaped longer
        for key in ("name", "arguments"):
            value = function.get(key)
            if value is not None and not isinstance(value, str):
                return None
            strings.append(value or "")
    framing = MESSAGE_TOKENS + NAME_TOKENS + TOOL_CALL_TOKENS * len(functions)
    return framing + sum(utf8_size(string) for string in strings)


def utf8_size(text: str) -> int:
    """`text`'s length in UTF-8 bytes (a lone surrogate as the 3 bytes it would take)."""
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def _store(cache: OrderedDict[bytes, int], key: bytes, tokens: int, size: int) -> None:
    cache[key] = tokens
    cache.move_to_end(key)
    if len(cache) > size:
        cache.popitem(last=False)


def image_tokens(detail: object, size: tuple[int, int] | None) -> int:
    """OpenAI's tile count for one image: 85 at low detail, else 85 + 170 per 512-px tile.

    `size` is (width, height) in pixels when known; without it a high or auto image costs
    `IMAGE_HIGH_TOKENS`, the most the tile method charges.
    """
    if detail == "low":
        return IMAGE_LOW_TOKENS
    if size is None:
        return IMAGE_HIGH_TOKENS
    return IMAGE_LOW_TOKENS + IMAGE_TILE_TOKENS * _tiles(*size)


def _tiles(width: int, height: int) -> int:
    # Fit inside 2048 x 2048, then shrink until the short side is at most 768 px.
    fit = min(1.0, 2048 / max(width, height))
    width, height = int(width * fit), int(height * fit)
    shrink = min(1.0, 768 / max(min(width, height), 1))
    width, height = int(width * shrink), int(height * shrink)
    return max(math.ceil(width / 512), 1) * max(math.ceil(height / 512), 1)


def _image_part_tokens(part: Mapping[str, Any]) -> int:
    image = part.get("image_url")
    if isinstance(image, str):  # a bare URL, as some clients send it
        image = {"url": image}
    if not isinstance(image, dict):
        return IMAGE_HIGH_TOKENS
    url = image.get("url")
    return image_tokens(image.get("detail"), _png_size(url) if isinstance(url, str) else None)


def _png_size(url: str) -> tuple[int, int] | None:
    """The size of a PNG data URL, read from its header: screenshots are mostly PNGs."""
    if not url.startswith(_PNG_DATA_URL):
        return None
    start = len(_PNG_DATA_URL)
    try:
        # 32 base64 characters are the 24 bytes holding the signature and the IHDR size.
        header = base64.b64decode(url[start : start + 32], validate=True)
    except ValueError:  # binascii.Error, or non-ASCII text
        return None
    if len(header) < 24 or header[:8] != _PNG_SIGNATURE or header[12:16] != b"IHDR":
        return None
    width, height = int.from_bytes(header[16:20], "big"), int.from_bytes(header[20:24], "big")
    return (width, height) if width > 0 and height > 0 else None


def _audio_part_tokens(part: Mapping[str, Any]) -> int:
    audio = part.get("input_audio")
    audio = audio if isinstance(audio, dict) else {}
    data, audio_format = audio.get("data"), audio.get("format")
    size = len(data) * 3 // 4 if isinstance(data, str) else 0  # base64 to bytes
    rate = _AUDIO_BYTES_PER_SECOND.get(
        audio_format if isinstance(audio_format, str) else "", _AUDIO_DEFAULT_BYTES_PER_SECOND
    )
    return max(1, math.ceil(size * AUDIO_TOKENS_PER_SECOND / rate))


def _messages(body: Mapping[str, Any]) -> list[Any]:
    messages = body.get("messages")
    return messages if isinstance(messages, list) else []


def _schemas(body: Mapping[str, Any]) -> list[object]:
    found: list[object] = []
    tools = body.get("tools")
    if isinstance(tools, list):
        # Only the function object reaches the prompt; its {"type": "function"} wrapper does not.
        found += [_function_of(tool) for tool in tools]
    functions = body.get("functions")
    if isinstance(functions, list):
        found += functions
    response_format = body.get("response_format")
    if isinstance(response_format, dict) and response_format.get("type") == "json_schema":
        found.append(response_format.get("json_schema"))
    return found


def _function_of(tool: object) -> object:
    if isinstance(tool, dict) and isinstance(tool.get("function"), dict):
        return tool["function"]
    return tool


# Built once: `json.dumps` with options builds a new encoder per call, a fifth of the time
# a cached count takes. Compact output is not ASCII-escaped, so a non-ASCII character costs
# what it costs rather than six escape characters. Cache keys use `proxy.core.digests`.
_COMPACT: Final = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, default=str)


def _compact(value: object) -> str:
    return _COMPACT.encode(value)


def _is_reasoning(item: object) -> bool:
    return isinstance(item, dict) and item.get("type") == "reasoning"
