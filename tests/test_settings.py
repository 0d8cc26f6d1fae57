"""Loading settings: file < environment < overrides, and errors that name the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from proxy.core import hooks
from proxy.errors import ConfigError
from proxy.settings import DEFAULT_CONFIG_PATH, Settings, load_settings

REPO = Path(__file__).resolve().parent.parent


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "proxy.yaml"
    path.write_text(text)
    return path


def test_shipped_config_equals_defaults() -> None:
    # config/proxy.yaml documents every key with its default value; keep them in step.
    assert load_settings(REPO / "config" / "proxy.yaml", environ={}) == Settings()


def test_shipped_config_names_every_key() -> None:
    text = (REPO / "config" / "proxy.yaml").read_text()
    walked = set()
    for section, model in Settings.model_fields.items():
        assert f"\n{section}:" in text
        annotation = model.annotation
        # A model's keys, or a pydantic dataclass's (`context`, the core's policy fields).
        keys = getattr(annotation, "model_fields", None) or getattr(
            annotation, "__pydantic_fields__", {}
        )
        for key in keys:
            assert f"  {key}:" in text, f"{section}.{key} is not documented"
            walked.add(f"{section}.{key}")
    assert {"context.compression_trigger", "context.learned_ttl_s"} <= walked


def test_file_then_env_then_overrides(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "upstream: {base_url: 'http://file:1/v1', timeout_s: 5}\ncontext: {keep_recent: 4}\n",
    )
    env = {
        "COMPACTION_PROXY_UPSTREAM__TIMEOUT_S": "7",
        "COMPACTION_PROXY_CONTEXT__AUTO_COMPACT": "false",
        "UNRELATED": "x",
    }
    settings = load_settings(path, {"upstream": {"base_url": "http://cli:2/v1"}}, environ=env)
    assert settings.upstream.base_url == "http://cli:2/v1"
    assert settings.upstream.timeout_s == 7
    assert settings.context.keep_recent == 4
    assert settings.context.auto_compact is False


def test_env_models_map_as_json_and_nested() -> None:
    env = {
        "COMPACTION_PROXY_MODELS": '{"Qwen/Qwen3-8B": {"context_window": 32768}}',
        "COMPACTION_PROXY_MODELS__LLAMA__KEEP_RECENT": "3",
    }
    policies = load_settings(Path("/dev/null"), environ=env).model_policies()
    assert policies.for_model("Qwen/Qwen3-8B").context_window == 32768
    assert policies.for_model("llama").keep_recent == 3
    assert policies.for_model("other") == policies.default


def test_model_overrides_inherit_context(tmp_path: Path) -> None:
    path = write(
        tmp_path, "context: {keep_recent: 4, strategy: truncate}\nmodels: {m: {keep_recent: 2}}\n"
    )
    policy = load_settings(path, environ={}).model_policies().for_model("m")
    assert (policy.keep_recent, policy.strategy) == (2, "truncate")


def test_secret_is_not_echoed() -> None:
    settings = load_settings(
        Path("/dev/null"), environ={"COMPACTION_PROXY_UPSTREAM__API_KEY": "sk-x"}
    )
    assert settings.upstream.api_key is not None
    assert "sk-x" not in repr(settings)
    with pytest.raises(ConfigError) as caught:
        load_settings(Path("/dev/null"), {"upstream": {"api_key": ["sk-secret"]}}, environ={})
    assert "upstream.api_key" in caught.value.message
    assert "sk-secret" not in caught.value.message


def test_empty_api_key_means_unset() -> None:
    env = {"COMPACTION_PROXY_UPSTREAM__API_KEY": ""}
    assert load_settings(Path("/dev/null"), environ=env).upstream.api_key is None


def test_missing_default_file_means_defaults(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert not DEFAULT_CONFIG_PATH.exists()
    assert load_settings(environ={}) == Settings()


def test_default_file_read_when_present(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "proxy.yaml").write_text("server: {port: 9999}\n")
    assert load_settings(environ={}).server.port == 9999


@pytest.mark.parametrize(
    ("text", "env", "expected"),
    [
        (
            "upstream: {timeout_s: -1}",
            {},
            "upstream.timeout_s: Input should be greater than 0 (got -1)",
        ),
        ("upstream: {base_ulr: x}", {}, "upstream.base_ulr: unknown key"),
        (
            "upstream: {base_url: 'ftp://x'}",
            {},
            "upstream.base_url: Value error, must start with http",
        ),
        ("context: {strategy: fold}", {}, "context.strategy: Input should be 'auto'"),
        ("context: {compression_trigger: 1.5}", {}, "context.compression_trigger"),
        ("models: {m: {keep_recent: -2}}", {}, "models.m.keep_recent"),
        (
            "redis: {url: 'http://x'}",
            {},
            "redis.url: Value error, must be empty or start with redis://",
        ),
        (
            "",
            {"COMPACTION_PROXY_SERVER__PORT": "eighty"},
            "server.port: Input should be a valid integer",
        ),
        ("", {"COMPACTION_PROXY_MODELS": "{not json"}, "COMPACTION_PROXY_"),
        ("- a list", {}, "must hold a mapping of keys, not a list"),
        ("upstream: [", {}, "is not valid YAML"),
    ],
)
def test_errors_name_the_key(tmp_path: Path, text: str, env: dict[str, str], expected: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(write(tmp_path, text), environ=env)
    assert expected in caught.value.message


def test_unreadable_file_is_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_settings(tmp_path / "absent.yaml", environ={})


def test_target_must_stay_below_trigger(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="compaction_target must be below compression_trigger"):
        load_settings(write(tmp_path, "context: {compaction_target: 0.9}\n"), environ={})
    path = write(tmp_path, "models: {m: {compression_trigger: 0.4}}\n")
    with pytest.raises(ConfigError, match=r"models\.m: compaction_target"):
        load_settings(path, environ={})


def test_hooks_become_core_rules(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
hooks:
  - on: turn_start
    condition: {type: context_pressure, threshold: 0.6}
    action: {type: compact_context, strategy: clear_tool_results, keep_recent: 4}
  - on: turn_end
    action: {type: log, message: "turn {turn}"}
    cooldown: 30
""",
    )
    rules = load_settings(path, environ={}).hook_rules()
    assert rules == (
        hooks.Hook(
            "turn_start",
            hooks.ContextPressure(0.6),
            hooks.CompactContext("clear_tool_results", 4, None),
        ),
        hooks.Hook("turn_end", hooks.Always(), hooks.Log("turn {turn}"), 30.0),
    )


@pytest.mark.parametrize(
    ("hook", "expected"),
    [
        ("{on: turn_middle, action: {type: log, message: x}}", "hooks.0.on"),
        ("{on: turn_end, action: {type: shout, message: x}}", "hooks.0.action"),
        ("{on: turn_end, condition: {type: turn_count}, action: {type: log, message: x}}",
         "hooks.0.condition.turn_count.count"),
    ],
)  # fmt: skip
def test_bad_hooks_name_the_key(tmp_path: Path, hook: str, expected: str) -> None:
    with pytest.raises(ConfigError, match=expected):
        load_settings(write(tmp_path, f"hooks: [{hook}]\n"), environ={})


def test_redis_defaults_are_the_embedded_store() -> None:
    redis = Settings().redis
    assert (redis.url, redis.mode, redis.sentinels, redis.sentinel_master) == ("", "single", (), "")
    assert (redis.session_ttl_s, redis.timeout_s) == (2592000, 2.0)


def test_redis_sentinel_mode_reads_its_sentinels(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "redis: {mode: sentinel, sentinel_master: primary, sentinels: ['s1:26379', '[::1]:26380']}",
    )
    redis = load_settings(path, environ={}).redis
    assert redis.sentinel_addresses() == [("s1", 26379), ("::1", 26380)]


def test_redis_sentinels_from_the_environment_as_json() -> None:
    env = {
        "COMPACTION_PROXY_REDIS__MODE": "sentinel",
        "COMPACTION_PROXY_REDIS__SENTINEL_MASTER": "primary",
        "COMPACTION_PROXY_REDIS__SENTINELS": '["a:26379", "b:26379"]',
        "COMPACTION_PROXY_REDIS__SESSION_TTL_S": "3600",
    }
    redis = load_settings(Path("/dev/null"), environ=env).redis
    assert redis.sentinels == ("a:26379", "b:26379")
    assert redis.session_ttl_s == 3600


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("redis: {mode: sentinel, sentinel_master: m}", "redis.sentinels must list host:port"),
        ("redis: {mode: sentinel, sentinels: ['s:26379']}", "redis.sentinel_master must name"),
        (
            "redis: {mode: sentinel, sentinel_master: m, sentinels: [s]}",
            "redis.sentinels: Value error, 's' is not",
        ),
        ("redis: {mode: sentinel, sentinel_master: m, sentinels: ['s:0']}", "'s:0' is not host"),
        (
            "redis: {mode: sentinel, sentinel_master: m, sentinels: ['s:1'], url: 'unix:///x'}",
            "redis.url cannot be unix://",
        ),
        ("redis: {mode: cluster}", "redis.url must be a redis:// or rediss:// node"),
        ("redis: {mode: cluster, url: 'unix:///tmp/r.sock'}", "redis.url must be a redis://"),
        ("redis: {mode: replicated}", "redis.mode: Input should be 'single'"),
        ("redis: {session_ttl_s: 0}", "redis.session_ttl_s: Input should be greater than 0"),
        ("redis: {timeout_s: -1}", "redis.timeout_s: Input should be greater than 0"),
    ],
)
def test_bad_redis_keys_are_named(tmp_path: Path, text: str, expected: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(write(tmp_path, text), environ={})
    assert expected in caught.value.message


def test_inject_message_only_at_turn_start(tmp_path: Path) -> None:
    hook = "{on: turn_end, action: {type: inject_message, message: x}}"
    with pytest.raises(ConfigError, match="inject_message runs on turn_start"):
        load_settings(write(tmp_path, f"hooks: [{hook}]\n"), environ={})


# --- responses: who answers the Responses API's compaction, and its key ---------------------------

VLLM = {"upstream": {"base_url": "http://vllm:8000/v1"}}
KEY = "a-random-key-of-at-least-32-bytes-0123"


def test_compaction_defaults_to_auto_with_no_key() -> None:
    settings = load_settings(overrides={}, environ={})
    assert settings.responses.compaction == "auto"
    assert settings.responses.compaction_key is None
    assert settings.compaction_handler() == "upstream"  # the default upstream is OpenAI's
    assert load_settings(overrides=VLLM, environ={}).compaction_handler() == "proxy"


def test_the_compaction_key_comes_from_the_environment_and_empty_is_unset() -> None:
    env = {"COMPACTION_PROXY_RESPONSES__COMPACTION_KEY": KEY}
    key = load_settings(overrides={}, environ=env).responses.compaction_key
    assert key is not None
    assert key.get_secret_value() == KEY
    empty = {"COMPACTION_PROXY_RESPONSES__COMPACTION_KEY": ""}
    assert load_settings(overrides={}, environ=empty).responses.compaction_key is None


def test_a_short_compaction_key_is_refused_without_echoing_it() -> None:
    with pytest.raises(
        ConfigError, match=r"responses\.compaction_key: .*at least 32 bytes"
    ) as raised:
        load_settings(overrides={"responses": {"compaction_key": "hunter2"}}, environ={})
    assert "hunter2" not in str(raised.value)


@pytest.mark.parametrize(
    "shared",
    [
        {"server": {"workers": 2}, "redis": {"url": "redis://r:6379/0"}},
        {"redis": {"url": "redis://r:6379/0"}},
    ],
)
def test_a_shared_store_that_answers_compaction_needs_a_key(shared: dict[str, object]) -> None:
    with pytest.raises(ConfigError, match=r"responses\.compaction_key must be set") as raised:
        load_settings(overrides={**VLLM, **shared}, environ={})
    assert "responses.compaction: upstream" in str(raised.value)  # the other way out
    keyed = {**VLLM, **shared, "responses": {"compaction_key": KEY}}
    assert load_settings(overrides=keyed, environ={}).compaction_handler() == "proxy"
    upstream = {**VLLM, **shared, "responses": {"compaction": "upstream"}}
    assert load_settings(overrides=upstream, environ={}).compaction_handler() == "upstream"
    # In front of OpenAI, `auto` leaves compaction to it: no key is needed.
    assert load_settings(overrides=shared, environ={}).compaction_handler() == "upstream"
