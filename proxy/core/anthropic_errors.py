"""The proxy's own errors in the Messages API's shape, for clients on `/v1/messages`.

Anthropic's SDKs and Claude Code read `{"type": "error", "error": {"type": ..., "message":
...}}`; the OpenAI shape the proxy answers elsewhere (`proxy.errors`) would leave them with
no message to show. Upstream errors are never rewritten: these are for what the proxy
itself refuses or fails at on this route. The type follows the status, as Anthropic's does.

The proxy's "cannot fit" answer starts as the provider's own overflow error does,
`prompt is too long: N tokens > M maximum`: Claude Code compacts its conversation itself
when it reads that, and the proxy's overflow classifier knows it as an overflow.
"""

from __future__ import annotations

from typing import Any, Final

from proxy.errors import ProxyError

ERROR_TYPES: Final = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}
"""The API's error type for each status it documents."""


def error_type(status: int) -> str:
    """The error type for `status`: the documented one, else by its class."""
    known = ERROR_TYPES.get(status)
    if known is not None:
        return known
    return "api_error" if status >= 500 else "invalid_request_error"


def error_body(status: int, message: str, kind: str | None = None) -> dict[str, Any]:
    """An error body in the Messages API's shape; `kind` overrides the status's type."""
    return {"type": "error", "error": {"type": kind or error_type(status), "message": message}}


def proxy_error_body(error: ProxyError) -> dict[str, Any]:
    """A proxy error (its status and message) in the Messages API's shape."""
    return error_body(error.status_code, error.message)


def prompt_too_long(tokens: int, limit: int, detail: str = "") -> str:
    """The words of an overflow as Anthropic states it, then the proxy's `detail`."""
    said = f"prompt is too long: {tokens} tokens > {limit} maximum"
    return f"{said}. {detail}" if detail else said
