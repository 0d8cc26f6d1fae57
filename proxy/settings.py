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

import dataclasses
import functools
import operator
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, get_args, get_type_hints

import yaml
from annotated_types import Gt
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    GetPydanticSchema,
    SecretStr,
    SerializerFunctionWrapHandler,
    Tag,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    WrapSerializer,
    create_model,
    field_validator,
    model_validator,
)
from pydantic.dataclasses import dataclass as pydantic_dataclass
from pydantic_core import ErrorDetails
from pydantic_settings import EnvSettingsSource

from proxy.core import hooks as core_hooks
from proxy.core.capsule import MIN_KEY_BYTES
from proxy.core.delegation import CompactionMode, Handler, compaction_handler
from proxy.core.keys import ClientKeys, configured_hash, tenant_name
from proxy.core.policy import ContextPolicy, ModelPolicies
from proxy.core.summary import DEFAULT_CACHED_PRICE
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
    cached_input_price: float = Field(default=DEFAULT_CACHED_PRICE, ge=0, le=1)
    """What the upstream charges for a cached input token, as a share of an uncached one
    (0.1 Anthropic, OpenAI's GPT-5 models, DeepSeek; 0.25 GPT-4.1; 0.5 GPT-4o; 1 when it
    caches nothing): the conversation's own model is asked for a summary with the
    conversation it cached only when that costs less than the span as a transcript."""

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


@pydantic_dataclass(frozen=True, config=ConfigDict(extra="forbid"))
class ContextSettings(ContextPolicy):
    """The `context` section: the default `ContextPolicy`, whose fields (declared, typed and
    bounded there) are this section's keys, plus the keys that are not per model."""

    # Seconds a fact a provider's answers taught (a window from an overflow error, the
    # calibration from usage) is kept for its tenant and model: its own clock, not the
    # session TTL, so a wrong lesson ages out within a day. Not a per-model key.
    learned_ttl_s: Annotated[float, Gt(0)] = 86400
    summary_brain: SummaryBrainSettings = SummaryBrainSettings()

    @model_validator(mode="after")
    def _consistent(self) -> ContextSettings:
        self.check()
        return self

    def policy(self) -> ContextPolicy:
        """The section's policy keys as the core's value (the default policy)."""
        return ContextPolicy(
            **{key.name: getattr(self, key.name) for key in dataclasses.fields(ContextPolicy)}
        )

    def as_dict(self) -> dict[str, Any]:
        """Every key of the section (secrets stay `SecretStr`)."""
        dumped: dict[str, Any] = _CONTEXT.dump_python(self)
        return dumped

    def changed(self, changes: Mapping[str, Any]) -> ContextSettings:
        """A copy with `changes` applied, validated like the config file (raises
        ValidationError, its locations relative to the section)."""
        return _CONTEXT.validate_python({**self.as_dict(), **changes})


_CONTEXT = TypeAdapter(ContextSettings)


class ContextOverrides(_Section):
    """A `models:` entry: any key of `ContextPolicy`, None (or unset) inheriting the `context`
    section's. The fields are the policy's, made optional by `_overrides_of`: `models:` is
    validated with that subclass."""

    def changes(self) -> dict[str, Any]:
        """The keys the entry sets."""
        return self.model_dump(exclude_none=True)


def _overrides_of(policy: type[ContextPolicy]) -> type[ContextOverrides]:
    hints = get_type_hints(policy, include_extras=True)
    keys: dict[str, Any] = {
        key.name: (hints[key.name] | None, None) for key in dataclasses.fields(policy)
    }
    return create_model(f"{ContextOverrides.__name__}Entry", __base__=ContextOverrides, **keys)


def _validated_as(shape: object) -> GetPydanticSchema:
    """An `Annotated` marker: validate the field as `shape` (a type made at run time, which a
    type checker cannot read; the field's declared type is what `shape` produces)."""
    return GetPydanticSchema(lambda _source, handler: handler.generate_schema(shape))


# Hooks: the `condition:` and `action:` mappings are validated straight into the core's
# dataclasses (`proxy.core.hooks`), picked by their `type:` key; nothing here lists them.


def type_key(cls: type) -> str:
    """A hook condition's or action's `type:` key: its class name in snake_case."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", cls.__name__).lower()


def _one_of(union: object) -> GetPydanticSchema:
    """An `Annotated` marker: validate a union of the core's dataclasses from a mapping whose
    `type:` key names the class (and write the key back when the settings are dumped)."""
    members = [_tagged(cls) for cls in get_args(union)]
    tagged: object = Annotated[functools.reduce(operator.or_, members), Discriminator(_type_of)]
    return _validated_as(tagged)


def _type_of(value: object) -> str | None:
    if isinstance(value, Mapping):
        return value.get("type")
    # Already the core's value: a default, or settings made in code.
    return type_key(type(value)) if dataclasses.is_dataclass(value) else None


def _tagged(cls: type) -> object:
    tag = type_key(cls)
    # Fields the core marks `config: False` are its own (the default hook's `force`).
    internal = {key.name for key in dataclasses.fields(cls) if key.metadata.get("config") is False}

    def untagged(value: object) -> object:
        if not isinstance(value, Mapping):
            return value
        kept = {key: item for key, item in value.items() if key != "type"}
        if internal & kept.keys():
            raise ValueError(f"{', '.join(sorted(internal & kept.keys()))}: unknown key")
        return kept

    def tagged(value: object, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        fields = handler(value).items()
        return {"type": tag, **{key: item for key, item in fields if key not in internal}}

    return Annotated[cls, BeforeValidator(untagged), WrapSerializer(tagged), Tag(tag)]


ConditionSettings = Annotated[core_hooks.Condition, _one_of(core_hooks.Condition)]
ActionSettings = Annotated[core_hooks.Action, _one_of(core_hooks.Action)]


class HookSettings(_Section):
    """One hook: `on` an event, when `condition` holds, perform `action`, at most once per
    `cooldown` seconds."""

    # Not the core's `Hook` validated directly, as its condition and action are: the key is
    # `cooldown` here and `cooldown_s` there, YAML's `on:` needs taking back, and the rule
    # below spans two fields. Four fields, so a mirror is the plainer code.
    on: core_hooks.Event
    condition: ConditionSettings = core_hooks.Always()
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
        if self.on == "turn_end" and isinstance(self.action, core_hooks.InjectMessage):
            raise ValueError("inject_message runs on turn_start (after the answer it is too late)")
        return self

    def core(self) -> core_hooks.Hook:
        return core_hooks.Hook(self.on, self.condition, self.action, self.cooldown)


class ServerSettings(_Section):
    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=1, le=65535)
    max_body_bytes: int = Field(default=64 * 1024 * 1024, gt=0)
    workers: int = Field(default=1, ge=1, le=64)
    """Processes serving the port (one core each); more than one needs `redis.url`, where
    they share sessions, checkpoints and summaries."""


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


class ResponsesSettings(_Section):
    """The Responses API's own compaction (`POST /v1/responses/compact`, `compaction_trigger`)."""

    compaction: CompactionMode = "auto"
    """Who answers it: `proxy`, `upstream` (forwarded untouched), or `auto`: the upstream when
    it is OpenAI's API, the proxy otherwise (`proxy.core.delegation`)."""
    compaction_key: SecretStr | None = None
    """The key the proxy's compaction items are signed with: the same on every replica, so
    that any of them reads the items another made. Unset, a single process makes one for its
    life (its items are refused after a restart); several workers or a shared store refuse
    to start without one while the proxy answers compaction."""

    @field_validator("compaction_key", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: object) -> object:
        return None if value == "" else value

    @field_validator("compaction_key")
    @classmethod
    def _long_enough(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and len(value.get_secret_value().encode()) < MIN_KEY_BYTES:
            raise ValueError(
                f"must be at least {MIN_KEY_BYTES} bytes (a random string: "
                "`openssl rand -base64 32`)"
            )
        return value


class MessagesSettings(_Section):
    """The Messages API (`POST /v1/messages`)."""

    context_management: Literal["provider", "proxy"] = "provider"
    """Who compacts a request whose `context_management` asks the provider to clear tool
    uses or compact (`clear_tool_uses_*`, `compact_*`): `provider` (the default) forwards it
    untouched and leaves that conversation to the provider, as the client asked; `proxy`
    compacts it as any other, the edits still forwarded. Clearing thinking alone (which
    Claude Code asks on every request, keeping all) is no such edit."""


class Settings(_Section):
    upstream: UpstreamSettings = UpstreamSettings()
    redis: RedisSettings = RedisSettings()
    context: ContextSettings = ContextSettings()
    models: Annotated[
        dict[str, ContextOverrides], _validated_as(dict[str, _overrides_of(ContextPolicy)])
    ] = {}
    hooks: list[HookSettings] = []
    server: ServerSettings = ServerSettings()
    log: LogSettings = LogSettings()
    admin: AdminSettings = AdminSettings()
    auth: AuthSettings = AuthSettings()
    responses: ResponsesSettings = ResponsesSettings()
    messages: MessagesSettings = MessagesSettings()
    chat_commands: bool = False
    """Answer `/context`, `/compact` and `/context clear` (the whole last user message)
    from the proxy itself, without calling the upstream."""

    def model_policies(self) -> ModelPolicies:
        """The `context` and `models` sections as the core's frozen value objects."""
        default = self.context.policy()
        changes = {name: entry.changes() for name, entry in self.models.items()}
        overrides = {name: default.replace(**keys) for name, keys in changes.items()}
        windows = {
            name: keys["context_window"]
            for name, keys in changes.items()
            if "context_window" in keys
        }
        return ModelPolicies(default=default, overrides=overrides, windows=windows)

    def with_context(self, changes: Mapping[str, Any]) -> Settings:
        """These settings with `context` keys changed, validated like the config file (the
        checks across `models:` too). Raises ValidationError."""
        return Settings.model_validate({**dict(self), "context": self.context.changed(changes)})

    def hook_rules(self) -> tuple[core_hooks.Hook, ...]:
        """The declared hooks as the core's values (the default hook is added per model)."""
        return tuple(hook.core() for hook in self.hooks)

    @model_validator(mode="after")
    def _workers_share_a_store(self) -> Settings:
        # The embedded store lives in one process: workers would each keep their own
        # sessions, and a conversation's checkpoint would be found only by the worker that
        # happened to compact it.
        if self.server.workers > 1 and not self.redis.url:
            raise ValueError(
                "server.workers above 1 needs redis.url: the embedded store lives in one "
                "process, and the workers would not share their sessions"
            )
        return self

    def compaction_handler(self) -> Handler:
        """Who answers compaction requests: `responses.compaction`, `auto` decided by the
        upstream's host."""
        return compaction_handler(self.responses.compaction, self.upstream.base_url)

    @model_validator(mode="after")
    def _compaction_key_shared(self) -> Settings:
        # A key made up by one process would be another process's "another key": every
        # item one worker or replica made would be refused by the others.
        shared = self.server.workers > 1 or bool(self.redis.url)
        keyless = self.responses.compaction_key is None
        if shared and keyless and self.compaction_handler() == "proxy":
            raise ValueError(
                "responses.compaction_key must be set when the proxy answers compaction "
                f"requests (responses.compaction: {self.responses.compaction}, upstream "
                f"{redact(self.upstream.base_url)}) with several workers or a shared store "
                "(redis.url): every worker and replica must read the compaction items the "
                "others make. Set it to the same random string of at least "
                f"{MIN_KEY_BYTES} bytes on each (`openssl rand -base64 32`), or set "
                "responses.compaction: upstream"
            )
        return self

    @model_validator(mode="after")
    def _model_policies_consistent(self) -> Settings:
        # Each entry's keys are valid alone; merged with `context`, they may not agree.
        for name, policy in self.model_policies().overrides.items():
            try:
                policy.check()
            except ValueError as exc:
                raise ValueError(f"models.{name}: {exc}") from exc
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
    return "invalid configuration: " + "; ".join(_problem(error) for error in exc.errors())


def _problem(error: ErrorDetails) -> str:
    key = ".".join(str(part) for part in error["loc"]) or "(top level)"
    # A model rejects an unknown key as extra, a dataclass (`context`, a hook's action) as
    # an unexpected argument: the same mistake to the user.
    if error["type"] in ("extra_forbidden", "unexpected_keyword_argument"):
        return f"{key}: unknown key"
    if error["type"] == "union_tag_invalid":  # a hook's `type:` names no condition/action
        context = error.get("ctx", {})
        return f"{key}.type: must be one of {context['expected_tags']} (got {context['tag']!r})"
    if error["type"] == "union_tag_not_found":
        return f"{key}: needs a type key"
    # Not echoed: a secret key's value, nor a whole section (a check across its keys),
    # which may hold one; a URL's password is hidden.
    secret = any(word in key for word in _SECRET_WORDS) or isinstance(error["input"], dict)
    got = "" if error["type"] == "missing" or secret else f" (got {redact(repr(error['input']))})"
    return f"{key}: {error['msg']}{got}"


# Values of keys with these words are never echoed back in an error message.
_SECRET_WORDS = ("api_key", "token", "password", "secret", "auth", "compaction_key")


def _kind(value: object) -> str:
    return type(value).__name__
