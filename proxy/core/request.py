"""Reading a chat completion, Responses API or Messages API request body.

The body is parsed once into plain JSON data and kept whole: `ChatRequest.body` is the
client's dict, unknown and vendor fields included (`top_k`, `reasoning_effort`, `metadata`),
and the proxy forwards the client's original bytes whenever it changes nothing.

Only what the proxy itself needs is checked here: the body is a JSON object with a
`messages` array of objects, within the codec's limits (nesting depth, integer length),
and a `model`, when a string, that is Unicode text (the store keys by it). Everything else (an
unknown `model`, a wrong `temperature`) is the upstream's to judge, so its own error reaches
the client exactly as it would directly.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass
from typing import Any

from proxy.core import anthropic, jsoncodec
from proxy.core.capsule import Sealer
from proxy.core.compaction_items import (
    Automatic,
    automatic,
    expand,
    trigger_at_end,
    without_management,
    without_trigger,
)
from proxy.core.compaction_replies import proxy_response
from proxy.core.messages import Message
from proxy.core.responses import chat_view, responses_body
from proxy.errors import InvalidRequestError


class Api(enum.Enum):
    """The API a request came in by, which is the API it is forwarded by."""

    CHAT = "chat"
    RESPONSES = "responses"
    MESSAGES = "messages"
    """Anthropic's Messages API (`POST /v1/messages`), read by `proxy.core.anthropic`."""


class Compaction(enum.Enum):
    """The compaction a Responses API request asks the provider for (OpenAI's own)."""

    COMPACT = "compact"
    """`POST /v1/responses/compact`."""
    TRIGGER = "compaction_trigger"
    """A `/v1/responses` request whose `input` ends with a `compaction_trigger` item."""


@dataclass(frozen=True, slots=True)
class ChatRequest:
    """A parsed chat completion request; `raw` holds the exact bytes the client sent."""

    raw: bytes
    body: dict[str, Any]
    """The chat completion body (for the Responses and Messages APIs, its chat view)."""
    api: Api = Api.CHAT
    compaction: Compaction | None = None
    """The compaction the request asks for, if any: `raw` is then the request to forward
    untouched (the trigger in it), `body` the conversation to compact (the trigger out)."""
    notes: frozenset[str] = frozenset()
    """The digests of the proxy's compaction blocks the request carried as compaction items
    (expanded in place: `raw` and `body` hold the blocks)."""
    session: str | None = None
    """The session those items belong to (the request's when the client names none)."""
    automatic: Automatic | None = None
    """The compaction `context_management` asks for, when the proxy does it in the
    provider's place: the field is out of `raw` and `body` then."""

    @property
    def model(self) -> str | None:
        model = self.body.get("model")
        return model if isinstance(model, str) else None

    @property
    def stream(self) -> bool:
        return self.body.get("stream") is True

    @property
    def messages(self) -> list[dict[str, Any]]:
        messages: list[dict[str, Any]] = self.body["messages"]
        return messages


def wire_body(request: ChatRequest, messages: list[Message]) -> dict[str, Any]:
    """The body to forward, `messages` in place of the request's, in the request's API."""
    if request.api is Api.RESPONSES:
        return responses_body(request.body, messages)
    if request.api is Api.MESSAGES:
        return anthropic.messages_body(request.body, messages)
    return {**request.body, "messages": messages}


def parse_chat_request(raw: bytes) -> ChatRequest:
    """Parse and minimally validate a chat completion body. Raises `InvalidRequestError`."""
    body = _json_object(raw)
    messages = body.get("messages")
    if messages is None:
        raise InvalidRequestError("Missing required parameter: 'messages'.", param="messages")
    if not isinstance(messages, list):
        raise InvalidRequestError(
            f"Invalid type for 'messages': expected an array, but got a {_json_kind(messages)}.",
            param="messages",
        )
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            raise InvalidRequestError(
                f"Invalid type for 'messages[{index}]': expected an object, "
                f"but got a {_json_kind(message)}.",
                param=f"messages[{index}]",
            )
    return ChatRequest(raw=raw, body=body)


def parse_responses_request(
    raw: bytes, sealer: Sealer | None = None, *, manage: bool = False
) -> ChatRequest:
    """Parse a Responses API body into its chat view. Raises `InvalidRequestError`.

    `input` may be absent (a stored prompt, or history on the provider's side) but must
    otherwise be a string or an array, as the API says; what the items hold is the
    provider's to judge (an item the proxy does not know is carried along untouched). The
    proxy's own compaction items are expanded (`proxy.core.compaction_items.expand`, with
    `sealer`'s key); an input ending with `compaction_trigger` asks for a compaction. With
    `manage` (the proxy compacts in the provider's place), `context_management` is read
    into `ChatRequest.automatic` and taken out of what is forwarded.
    """
    return _responses_request(raw, sealer, None, manage=manage)


def parse_compact_request(raw: bytes, sealer: Sealer | None = None) -> ChatRequest:
    """Parse a `POST /v1/responses/compact` body (a Responses API body without `stream`)."""
    return _responses_request(raw, sealer, Compaction.COMPACT)


def counted_body(raw: bytes, sealer: Sealer | None = None) -> bytes:
    """The body of `POST /v1/responses/input_tokens` to forward: the proxy's compaction
    items expanded (the provider counts the blocks they stand for, and could read none of
    them), else the client's own bytes. Raises `InvalidRequestError` as the create does."""
    body = _json_object(raw)
    _check_input(body)
    expansion = expand(body, sealer)
    return raw if expansion.body is body else jsoncodec.dumps(dict(expansion.body))


def parse_messages_request(raw: bytes) -> ChatRequest:
    """Parse a Messages API body (`POST /v1/messages`) into its chat view. Raises
    `InvalidRequestError` (`messages` missing or not an array, a body that is no JSON
    object); what the blocks hold is the provider's to judge."""
    body = _json_object(raw)
    return ChatRequest(raw=raw, body=anthropic.chat_view(body), api=Api.MESSAGES)


def _responses_request(
    raw: bytes, sealer: Sealer | None, compaction: Compaction | None, *, manage: bool = False
) -> ChatRequest:
    body = _json_object(raw)
    _check_input(body)
    expansion = expand(body, sealer)
    changed = expansion.body is not body
    body = dict(expansion.body)
    asked = automatic(body) if manage else None
    if manage and "context_management" in body:
        body, changed = without_management(body), True
    if changed:
        # What is forwarded, even untouched, is the expanded body: no provider reads the
        # proxy's items. One serialization, so the block is the same bytes every time.
        raw = jsoncodec.dumps(body)
    if compaction is None and trigger_at_end(body):
        compaction, body = Compaction.TRIGGER, without_trigger(body)
    return ChatRequest(
        raw=raw,
        body=chat_view(body, alone={id(block) for block in expansion.blocks}),
        api=Api.RESPONSES,
        compaction=compaction,
        notes=expansion.notes,
        session=expansion.session,
        automatic=None if compaction else asked,
    )


def _check_input(body: dict[str, Any]) -> None:
    """`input` of the API's type, and no `previous_response_id` the provider never saw."""
    given = body.get("input")
    if given is not None and not isinstance(given, str | list):
        raise InvalidRequestError(
            "Invalid type for 'input': expected a string or an array of input items, "
            f"but got a {_json_kind(given)}.",
            param="input",
        )
    previous = body.get("previous_response_id")
    if isinstance(previous, str) and proxy_response(previous):
        # A response the proxy answered itself (a compaction) is stored nowhere: forwarded,
        # the provider would answer that it does not know it, without saying why.
        raise InvalidRequestError(
            f"Previous response with id '{previous}' not found: compaction-proxy answered "
            "it itself (a compaction the provider never saw), and stores no response. Send "
            "the conversation in 'input' instead: the items the compaction gave back (the "
            "user messages and the compaction item), then the new ones.",
            param="previous_response_id",
            code="previous_response_not_found",
        )


def _json_object(raw: bytes) -> dict[str, Any]:
    """The body as a JSON object with a usable `model`, or `InvalidRequestError`."""
    try:
        body = jsoncodec.loads(raw)
    except jsoncodec.JSONLimitError as exc:
        raise InvalidRequestError(
            f"The JSON body of your request is beyond what this proxy accepts: {exc}."
        ) from exc
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidRequestError(
            f"We could not parse the JSON body of your request: {exc}. "
            "The body must be a JSON object."
        ) from exc
    if not isinstance(body, dict):
        raise InvalidRequestError(
            f"The request body must be a JSON object, not a JSON {_json_kind(body)}."
        )
    _check_model(body.get("model"))
    return body


def _check_model(model: object) -> None:
    # JSON may spell a lone surrogate (`"\\ud800"`), but it is no Unicode text: the model
    # names keys in the store, which encodes them as UTF-8 and cannot. No provider serves
    # such a model, so the request is refused here rather than failing deep inside.
    if isinstance(model, str) and not model.isascii() and not _is_unicode(model):
        raise InvalidRequestError(
            "Invalid 'model': the model name contains a lone UTF-16 surrogate (such as "
            "\\ud800), which is not a Unicode character.",
            param="model",
        )


def _is_unicode(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _json_kind(value: object) -> str:
    names = {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}
    return names.get(type(value), "number")
