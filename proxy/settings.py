"""Typed configuration: one `Settings` model, built once at startup.

Sources, lowest precedence first (each overrides the keys it names, nested keys merge):

1. the YAML file (`config/proxy.yaml` by default, `--config FILE` otherwise);
2. environment variables: `COMPACTION_PROXY_` + the key path joined with `__`, e.g.
   `COMPACTION_PROXY_UPSTREAM__API_KEY`; a whole mapping may be given as JSON
   (`COMPACTION_PROXY_MODELS='{"gpt-4o": {"context_window": 128000}}'`);
3. command-line flags (`--upstream`, `--redis`, `--host`, `--port`, `--log-level`).

Unknown keys are errors, so a typo in the file is reported instead of silently ignored.
Every problem surfaces as one `ConfigError` naming the key; the CLI turns it into exit code 2.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_settings import EnvSettingsSource

from proxy.core import hooks as core_hooks
from proxy.core.keys import ClientKeys, configured_hash, tenant_name
from proxy.core.policy import ContextPolicy, ModelPolicies, Strategy
from proxy.core.urls import redact, split_credentials
from proxy.errors import ConfigError
from proxy.observability.logs import LogFormat

ENV_PREFIX = "COMPACTION_PROXY_"
DEFAULT_CONFIG_PATH = Path("config/proxy.yaml")

LogLevel = Literal["critical", "error", "warning", "info", "debug"]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class UpstreamSettings(_Section):
    base_url: str = "https://api.openai.com/v1"
    api_key: SecretStr | None = None
    timeout_s: float = Field(default=600.0, gt=0)
    max_connections: int = Field(default=1000, ge=1)
    keepalive_s: float = Field(default=4.0, gt=0)

    @field_validator("api_key", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: object) -> object:
        # `API_KEY=` in a compose file or shell means "no key", not "authenticate with ''".
        return None if value == "" else value

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        return value.rstrip("/")

    @field_validator("api_key")
    @classmethod
    def _one_credential(cls, value: SecretStr | None, info: ValidationInfo) -> SecretStr | None:
        return _one_credential(value, info)


def _one_credential(api_key: SecretStr | None, info: ValidationInfo) -> SecretStr | None:
    # Credentials in the URL go as `Authorization: Basic`, a key as `Bearer`: one header
    # cannot carry both, and silently dropping either would be worse than saying so. (A
    # check on `api_key`, not on the section: its error then never echoes the key.)
    base_url = info.data.get("base_url")
    if base_url and api_key is not None and split_credentials(base_url)[1] is not None:
        raise ValueError("cannot be set with credentials in base_url: set one of them")
    return api_key


RedisMode = Literal["single", "sentinel", "cluster"]


class RedisSettings(_Section):
    """Where sessions live: `mode` picks redis-py's client (Redis, Sentinel, RedisCluster)."""

    url: str = ""
    embedded_max_bytes: int = Field(default=256 * 1024 * 1024, ge=1024 * 1024)
    """With `url` empty: the memory the embedded store may hold, in bytes; past it the
    least recently used sessions are forgotten."""
    mode: RedisMode = "single"
    sentinel_master: str = ""
    sentinels: tuple[str, ...] = ()
    session_ttl_s: float = Field(default=2592000, gt=0)
    timeout_s: float = Field(default=2.0, gt=0)
    # Connections to Redis at most (per node in a cluster); past it a call waits for a free
    # one instead of failing, so a burst is slowed, not forgotten.
    max_connections: int = Field(default=256, ge=1)

    @field_validator("url")
    @classmethod
    def _redis_url(cls, value: str) -> str:
        if value and not value.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError("must be empty or start with redis://, rediss:// or unix://")
        return value

    @field_validator("sentinels")
    @classmethod
    def _host_ports(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for entry in value:
            _host_port(entry)
        return value

    @model_validator(mode="after")
    def _mode_needs(self) -> RedisSettings:
        if self.mode == "sentinel" and not self.sentinels:
            raise ValueError("redis.sentinels must list host:port entries when mode is sentinel")
        if self.mode == "sentinel" and not self.sentinel_master:
            raise ValueError("redis.sentinel_master must name the master when mode is sentinel")
        if self.mode == "sentinel" and self.url.startswith("unix://"):
            raise ValueError("redis.url cannot be unix:// when mode is sentinel")
        if self.mode == "cluster" and not self.url.startswith(("redis://", "rediss://")):
            raise ValueError("redis.url must be a redis:// or rediss:// node when mode is cluster")
        return self

    def sentinel_addresses(self) -> list[tuple[str, int]]:
        """`sentinels` as (host, port) pairs."""
        return [_host_port(entry) for entry in self.sentinels]


def _host_port(entry: str) -> tuple[str, int]:
    """`host:port` (or `[v6]:port`) as a pair. Raises ValueError naming the entry."""
    host, _, port = entry.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{entry!r} is not host:port")
    return host, int(port)


class SummaryBrainSettings(_Section):
    """Who writes summaries; unset keys mean: the upstream, the request's model, the
    client's own credentials."""

    base_url: str | None = None
    model: str | None = None
    api_key: SecretStr | None = None
    timeout_s: float = Field(default=120.0, gt=0)
    context_window: int | None = Field(default=None, gt=0)
    breaker_failures: int = Field(default=3, ge=1)
    """Failed summaries in a row after which the summarizer is not asked for a while."""
    breaker_cool_off_s: float = Field(default=60.0, gt=0)
    """How long it is not asked then (compaction goes on without summaries)."""
    max_concurrent: int = Field(default=4, ge=1)
    """Summaries written at once by one replica (more wait their turn, a few at most)."""

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value and not value.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        return value.rstrip("/") if value else None

    @field_validator("api_key")
    @classmethod
    def _one_credential(cls, value: SecretStr | None, info: ValidationInfo) -> SecretStr | None:
        return _one_credential(value, info)


class ContextSettings(_Section):
    """Execution-level defaults for compaction; `models:` overrides them per model."""

    context_window: int | None = Field(default=None, gt=0)
    output_reserved: int = Field(default=4096, ge=0)
    safety_margin: float = Field(default=0.03, ge=0, lt=0.5)
    strategy: Strategy = "auto"
    keep_recent: int = Field(default=10, ge=0)
    compression_trigger: float = Field(default=0.85, gt=0, le=1)
    prepare_at: float | None = Field(default=None, gt=0, le=1)
    compaction_target: float = Field(default=0.45, gt=0, le=1)
    summary_max_tokens: int = Field(default=1024, gt=0)
    summary_share: float = Field(default=0.06, gt=0, lt=1)
    ledger_share: float = Field(default=0.10, ge=0, lt=1)
    auto_compact: bool = True
    tool_result_max_share: float = Field(default=0.5, gt=0, le=1)
    cooldown_turns: int = Field(default=2, ge=0)
    max_context_turns: int = Field(default=0, ge=0)
    pin_first_user: bool = True
    # Seconds a fact a provider's answers taught (a window from an overflow error, the
    # calibration from usage) is kept for its tenant and model: its own clock, not the
    # session TTL, so a wrong lesson ages out within a day. Not a per-model key.
    learned_ttl_s: float = Field(default=86400, gt=0)
    summary_brain: SummaryBrainSettings = SummaryBrainSettings()

    @model_validator(mode="after")
    def _target_below_trigger(self) -> ContextSettings:
        # Hysteresis: compacting to at or above the trigger would fire again next turn.
        if self.compaction_target >= self.compression_trigger:
            raise ValueError("compaction_target must be below compression_trigger")
        if self.prepare_at is not None and self.prepare_at > self.compression_trigger:
            raise ValueError("prepare_at must be at or below compression_trigger")
        return self


class ContextOverrides(_Section):
    """The `context` keys a `models:` entry may override; unset keys inherit."""

    context_window: int | None = Field(default=None, gt=0)
    output_reserved: int | None = Field(default=None, ge=0)
    safety_margin: float | None = Field(default=None, ge=0, lt=0.5)
    strategy: Strategy | None = None
    keep_recent: int | None = Field(default=None, ge=0)
    compression_trigger: float | None = Field(default=None, gt=0, le=1)
    prepare_at: float | None = Field(default=None, gt=0, le=1)
    compaction_target: float | None = Field(default=None, gt=0, le=1)
    summary_max_tokens: int | None = Field(default=None, gt=0)
    summary_share: float | None = Field(default=None, gt=0, lt=1)
    ledger_share: float | None = Field(default=None, ge=0, lt=1)
    auto_compact: bool | None = None
    tool_result_max_share: float | None = Field(default=None, gt=0, le=1)
    cooldown_turns: int | None = Field(default=None, ge=0)
    max_context_turns: int | None = Field(default=None, ge=0)
    pin_first_user: bool | None = None


class _ContextPressure(_Section):
    type: Literal["context_pressure"]
    threshold: float = Field(gt=0)

    def core(self) -> core_hooks.Condition:
        return core_hooks.ContextPressure(self.threshold)


class _TurnCount(_Section):
    type: Literal["turn_count"]
    count: int = Field(ge=1)

    def core(self) -> core_hooks.Condition:
        return core_hooks.TurnCount(self.count)


class _ToolCalls(_Section):
    type: Literal["tool_calls"]
    threshold: int = Field(ge=1)

    def core(self) -> core_hooks.Condition:
        return core_hooks.ToolCalls(self.threshold)


class _MessageCount(_Section):
    type: Literal["message_count"]
    threshold: int = Field(ge=1)

    def core(self) -> core_hooks.Condition:
        return core_hooks.MessageCount(self.threshold)


class _Always(_Section):
    type: Literal["always"] = "always"

    def core(self) -> core_hooks.Condition:
        return core_hooks.Always()


class _CompactContext(_Section):
    type: Literal["compact_context"]
    strategy: Strategy | None = None
    keep_recent: int | None = Field(default=None, ge=0)
    summary_max_tokens: int | None = Field(default=None, gt=0)

    def core(self) -> core_hooks.Action:
        return core_hooks.CompactContext(self.strategy, self.keep_recent, self.summary_max_tokens)


class _InjectMessage(_Section):
    type: Literal["inject_message"]
    role: Literal["system", "developer", "user", "assistant"] = "system"
    message: str

    def core(self) -> core_hooks.Action:
        return core_hooks.InjectMessage(self.role, self.message)


class _Log(_Section):
    type: Literal["log"]
    message: str

    def core(self) -> core_hooks.Action:
        return core_hooks.Log(self.message)


ConditionSettings = Annotated[
    _ContextPressure | _TurnCount | _ToolCalls | _MessageCount | _Always,
    Field(discriminator="type"),
]
ActionSettings = Annotated[_CompactContext | _InjectMessage | _Log, Field(discriminator="type")]


class HookSettings(_Section):
    """One hook: `on` an event, when `condition` holds, perform `action`, at most once per
    `cooldown` seconds."""

    on: core_hooks.Event
    condition: ConditionSettings = _Always()
    action: ActionSettings
    cooldown: float = Field(default=0.0, ge=0)

    @model_validator(mode="before")
    @classmethod
    def _yaml_on_key(cls, data: Any) -> Any:
        # YAML 1.1 reads a bare `on:` key as the boolean true (PyYAML does): take it back.
        if isinstance(data, dict) and True in data:
            data = {("on" if key is True else key): value for key, value in data.items()}
        return data

    @model_validator(mode="after")
    def _inject_before_the_answer(self) -> HookSettings:
        if self.on == "turn_end" and isinstance(self.action, _InjectMessage):
            raise ValueError("inject_message runs on turn_start (after the answer it is too late)")
        return self

    def core(self) -> core_hooks.Hook:
        return core_hooks.Hook(self.on, self.condition.core(), self.action.core(), self.cooldown)


class ServerSettings(_Section):
    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=1, le=65535)
    max_body_bytes: int = Field(default=64 * 1024 * 1024, gt=0)


class LogSettings(_Section):
    level: LogLevel = "info"
    format: LogFormat = "json"
    """`json`: one JSON object per line (for a log collector); `text`: for a terminal."""
    content: bool = False
    """Put the last user message (truncated) in the request log. Off: no message content
    ever reaches the log."""


class AdminSettings(_Section):
    token: SecretStr | None = None
    """Unlocks every tenant's sessions in the session API and the dashboard; unset, only
    each caller's own sessions are visible (and the dashboard cannot load)."""

    @field_validator("token", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: object) -> object:
        return None if value == "" else value


class AuthSettings(_Section):
    keys: dict[str, str] = {}
    """Client API keys (plain, or `sha256:<hex>`) and the tenant name each one stands for.
    Set, only these keys may use the proxy, each in its tenant's sessions. Held hashed from
    the moment the settings load: a plain key is not kept, logged or echoed in an error."""

    @field_validator("keys", mode="before")
    @classmethod
    def _hashed(cls, value: object) -> object:
        if value is None:  # `keys:` left empty in the file
            return {}
        if not isinstance(value, Mapping):
            raise ValueError("must map API keys to tenant names")
        hashed: dict[str, str] = {}
        for key, name in value.items():
            if not isinstance(key, str) or not isinstance(name, str):
                raise ValueError("keys and tenant names must be strings")
            digest, tenant = configured_hash(key), tenant_name(name)
            if hashed.setdefault(digest, tenant) != tenant:
                raise ValueError(f"one key is listed for two tenants ({hashed[digest]}, {tenant})")
        return hashed

    def client_keys(self) -> ClientKeys | None:
        """The keys as the core's value; None when none are set (no client key is checked)."""
        return ClientKeys(dict(self.keys)) if self.keys else None


class Settings(_Section):
    upstream: UpstreamSettings = UpstreamSettings()
    redis: RedisSettings = RedisSettings()
    context: ContextSettings = ContextSettings()
    models: dict[str, ContextOverrides] = {}
    hooks: list[HookSettings] = []
    server: ServerSettings = ServerSettings()
    log: LogSettings = LogSettings()
    admin: AdminSettings = AdminSettings()
    auth: AuthSettings = AuthSettings()
    chat_commands: bool = False
    """Answer `/context`, `/compact` and `/context clear` (the whole last user message)
    from the proxy itself, without calling the upstream."""

    def model_policies(self) -> ModelPolicies:
        """The `context` and `models` sections as the core's frozen value objects."""
        context = self.context.model_dump(exclude={"summary_brain", "learned_ttl_s"})
        default = ContextPolicy(**context)
        overrides = {
            name: default.replace(**entry.model_dump(exclude_none=True))
            for name, entry in self.models.items()
        }
        windows = {
            name: entry.context_window
            for name, entry in self.models.items()
            if entry.context_window is not None
        }
        return ModelPolicies(default=default, overrides=overrides, windows=windows)

    def hook_rules(self) -> tuple[core_hooks.Hook, ...]:
        """The declared hooks as the core's values (the default hook is added per model)."""
        return tuple(hook.core() for hook in self.hooks)

    @model_validator(mode="after")
    def _model_targets_below_triggers(self) -> Settings:
        for name, policy in self.model_policies().overrides.items():
            if policy.compaction_target >= policy.compression_trigger:
                raise ValueError(
                    f"models.{name}: compaction_target must be below compression_trigger"
                )
            if policy.prepare_at is not None and policy.prepare_at > policy.compression_trigger:
                raise ValueError(f"models.{name}: prepare_at must be at or below the trigger")
        return self


def load_settings(
    config_path: Path | None = None,
    overrides: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> Settings:
    """Build the settings from file, environment and `overrides` (highest precedence).

    With `config_path` None the default path is read if it exists. Raises `ConfigError`.
    """
    data = _read_file(config_path)
    data = _deep_merge(data, _read_environ(os.environ if environ is None else environ))
    data = _deep_merge(data, dict(overrides or {}))
    try:
        return Settings.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_describe(exc)) from exc


def _read_file(path: Path | None) -> dict[str, Any]:
    if path is None:
        if not DEFAULT_CONFIG_PATH.is_file():
            return {}
        path = DEFAULT_CONFIG_PATH
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {path} is not valid YAML: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a mapping of keys, not a {_kind(data)}")
    return data


def _read_environ(environ: Mapping[str, str]) -> dict[str, Any]:
    source = EnvSettingsSource(
        Settings,  # type: ignore[arg-type]  # reads field names only; works on any model
        case_sensitive=False,
        env_prefix=ENV_PREFIX,
        env_nested_delimiter="__",
    )
    # The source snapshots os.environ when built; point it at the mapping we were given.
    source.env_vars = {key.lower(): value for key, value in environ.items()}
    try:
        return source()
    except ValueError as exc:  # a JSON value that does not parse
        raise ConfigError(f"environment variable with prefix {ENV_PREFIX}: {exc}") from exc


def _deep_merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in top.items():
        below = merged.get(key)
        if isinstance(below, dict) and isinstance(value, dict):
            merged[key] = _deep_merge(below, value)
        else:
            merged[key] = value
    return merged


def _describe(exc: ValidationError) -> str:
    """One line naming each bad key, e.g. `upstream.timeout_s: must be > 0 (got -1)`."""
    parts = []
    for error in exc.errors():
        key = ".".join(str(part) for part in error["loc"]) or "(top level)"
        # Not echoed: a secret key's value, nor a whole section (a check across its keys),
        # which may hold one; a URL's password is hidden.
        secret = any(word in key for word in _SECRET_WORDS) or isinstance(error["input"], dict)
        shown = redact(repr(error["input"]))
        got = "" if error["type"] == "missing" or secret else f" (got {shown})"
        if error["type"] == "extra_forbidden":
            parts.append(f"{key}: unknown key")
        else:
            parts.append(f"{key}: {error['msg']}{got}")
    return "invalid configuration: " + "; ".join(parts)


# Values of keys with these words are never echoed back in an error message.
_SECRET_WORDS = ("api_key", "token", "password", "secret", "auth")


def _kind(value: object) -> str:
    return type(value).__name__
