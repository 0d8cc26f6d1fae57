"""The proxy's own errors, and how each one reads on the wire.

Errors that come from the upstream are never rewritten: they are relayed with their status,
body and headers as the provider sent them. The classes here are for what *we* reject or fail
at, and each renders to the body shape every OpenAI SDK already parses::

    {"error": {"message": ..., "type": ..., "param": ..., "code": ...}}

The tree, every class of it::

    ProxyError                          500 server_error
    ├── InvalidRequestError             400 invalid_request_error
    │   ├── RequestTooLargeError        413 invalid_request_error / request_too_large
    │   ├── ContextLengthExceededError  400 invalid_request_error / context_length_exceeded
    │   ├── NotFoundError               404 invalid_request_error / not_found
    │   │   └── SessionNotFoundError    404 (the session API: no such session for the caller)
    │   ├── ConflictError               409 invalid_request_error / conflict
    │   │   └── NothingToCompactError   409 (the session has no archived history)
    │   └── WebSocketRefusedError       426 invalid_request_error / websocket_not_supported
    ├── AuthenticationError             401 invalid_request_error / invalid_api_key
    ├── PermissionDeniedError           403 invalid_request_error / admin_token_required
    ├── StoreDownError                  503 server_error / store_unavailable
    ├── UpstreamError                   502 upstream_error
    │   ├── UpstreamUnreachableError    502 upstream_error / upstream_unreachable
    │   └── UpstreamTimeoutError        504 upstream_error / upstream_timeout
    └── ConfigError                     (never on the wire: the CLI exits with code 2)

Errors that never reach a client live with the part that raises and handles them, because
each is a signal between two modules, not an answer:

- `proxy.adapters.store.StoreUnavailableError`: the store cannot be used now. The service
  degrades to plain forwarding; the session API answers `StoreDownError` (503).
- `proxy.adapters.summarizer.SummaryFailedError`: a summary could not be written; the
  compaction falls back to truncation.
- `proxy.core.jsoncodec.JSONLimitError` (a `json.JSONDecodeError`): valid JSON beyond the
  codec's limits; the request parser answers `InvalidRequestError`.
- `proxy.dry_run.DryRunError`: `inspect` exits with code 1 and the message.
- The demo's and the mock provider's own (`PortUnavailableError`, `FailedResponseError`,
  `Rejected`): tools around the proxy, not the proxy.
"""

from __future__ import annotations

from typing import Any, ClassVar


class ProxyError(Exception):
    """Base of every error the proxy raises itself."""

    status_code: ClassVar[int] = 500
    error_type: ClassVar[str] = "server_error"
    default_code: ClassVar[str | None] = None

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code if code is not None else self.default_code

    def to_body(self) -> dict[str, Any]:
        """The OpenAI-shaped error body for this error."""
        return {
            "error": {
                "message": self.message,
                "type": self.error_type,
                "param": self.param,
                "code": self.code,
            }
        }


class InvalidRequestError(ProxyError):
    """The client's request cannot be read (bad JSON, wrong shape)."""

    status_code = 400
    error_type = "invalid_request_error"


class RequestTooLargeError(InvalidRequestError):
    """The request body is over `server.max_body_bytes`."""

    status_code = 413
    default_code = "request_too_large"


class ContextLengthExceededError(InvalidRequestError):
    """Even compacted as far as it can be, the request is over the model's window: answered
    by the proxy in the provider's words rather than spending a round trip on a certain 400."""

    default_code = "context_length_exceeded"


class AuthenticationError(ProxyError):
    """The operator API was called without a usable credential."""

    status_code = 401
    error_type = "invalid_request_error"
    default_code = "invalid_api_key"


class PermissionDeniedError(ProxyError):
    """The call needs the admin token."""

    status_code = 403
    error_type = "invalid_request_error"
    default_code = "admin_token_required"


class NotFoundError(InvalidRequestError):
    """No such session for this caller (another tenant's is none of theirs)."""

    status_code = 404
    default_code = "not_found"


class ConflictError(InvalidRequestError):
    """The request is well formed but the session's state does not allow it."""

    status_code = 409
    default_code = "conflict"


class WebSocketRefusedError(InvalidRequestError):
    """A WebSocket to a `/v1/` path (Codex's transport for the Responses API): the proxy
    serves HTTP only. 426 is the one refusal on which Codex falls back to HTTP at once; it
    retries any other for about six seconds first."""

    status_code = 426
    default_code = "websocket_not_supported"


class SessionNotFoundError(NotFoundError):
    """No such session for this caller (another tenant's counts as none)."""

    def __init__(self, session_id: str) -> None:
        super().__init__(f"No session {session_id!r} for this credential.", param="session_id")
        self.session_id = session_id


class NothingToCompactError(ConflictError):
    """The session has no archived history to compact."""

    def __init__(self, session_id: str) -> None:
        super().__init__(f"Session {session_id!r} has no archived history.")
        self.session_id = session_id


class StoreDownError(ProxyError):
    """The session store does not answer; the operator API cannot read or change it."""

    status_code = 503
    default_code = "store_unavailable"


class UpstreamError(ProxyError):
    """The upstream could not give an answer at all (as opposed to answering with an error)."""

    status_code = 502
    error_type = "upstream_error"


class UpstreamUnreachableError(UpstreamError):
    """Connecting to the upstream failed, or it dropped the connection before answering."""

    default_code = "upstream_unreachable"


class UpstreamTimeoutError(UpstreamError):
    """The upstream did not answer within `upstream.timeout_s`."""

    status_code = 504
    default_code = "upstream_timeout"


class ConfigError(ProxyError):
    """The configuration file or a value in it is invalid; names the key at fault."""
