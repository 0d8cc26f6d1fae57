"""The settings derived from the core's declarations: the `context` and `models:` keys are
`ContextPolicy`'s fields, the hook conditions and actions are `proxy.core.hooks`' classes.
Each constraint kind still stops a bad value with an error naming the key."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import get_args

import pytest
import yaml

from proxy.core import hooks
from proxy.core.policy import ContextPolicy
from proxy.errors import ConfigError
from proxy.settings import Settings, load_settings, type_key

POLICY_KEYS = [key.name for key in dataclasses.fields(ContextPolicy)]


def load(tmp_path: Path, text: str, env: dict[str, str] | None = None) -> Settings:
    path = tmp_path / "proxy.yaml"
    path.write_text(text)
    return load_settings(path, environ=env or {})


def problem(tmp_path: Path, text: str, env: dict[str, str] | None = None) -> str:
    with pytest.raises(ConfigError) as caught:
        load(tmp_path, text, env)
    return caught.value.message


def test_context_defaults_are_the_policy_defaults() -> None:
    assert Settings().model_policies().default == ContextPolicy()


@pytest.mark.parametrize("key", POLICY_KEYS)
def test_every_policy_field_is_a_context_and_a_models_key(tmp_path: Path, key: str) -> None:
    changed = _other_than_default(key)
    policies = load(tmp_path, yaml.safe_dump({"context": {key: changed}, "models": {"m": {}}}))
    assert getattr(policies.model_policies().default, key) == changed
    policies = load(tmp_path, yaml.safe_dump({"models": {"m": {key: changed}}}))
    assert getattr(policies.model_policies().for_model("m"), key) == changed
    assert policies.model_policies().default == ContextPolicy()


def _other_than_default(key: str) -> object:
    """A valid value for `key` other than its default (derived from it, so a new field
    needs no entry here unless its default is None)."""
    default = getattr(ContextPolicy(), key)
    if default is None:
        return {"context_window": 32_000, "prepare_at": 0.5}[key]
    if isinstance(default, bool):
        return not default
    if isinstance(default, int):
        return default + 1
    if isinstance(default, float):
        return round(default * 0.9, 4)  # shares stay in range and in their order
    return "truncate" if default != "truncate" else "auto"


def test_a_null_models_key_inherits(tmp_path: Path) -> None:
    settings = load(tmp_path, "context: {keep_recent: 4}\nmodels: {m: {keep_recent: null}}\n")
    assert settings.model_policies().for_model("m").keep_recent == 4


@pytest.mark.parametrize(
    ("text", "env", "expected"),
    [
        # Gt, Ge, and both ends of an Interval, from the core's annotations.
        ("context: {context_window: 0}", {},
         "context.context_window: Input should be greater than 0 (got 0)"),
        ("context: {keep_recent: -1}", {},
         "context.keep_recent: Input should be greater than or equal to 0 (got -1)"),
        ("context: {compression_trigger: 1.5}", {},
         "context.compression_trigger: Input should be less than or equal to 1 (got 1.5)"),
        ("context: {summary_share: 0}", {},
         "context.summary_share: Input should be greater than 0"),
        ("context: {safety_margin: 0.5}", {},
         "context.safety_margin: Input should be less than 0.5 (got 0.5)"),
        ("context: {ledger_share: -0.1}", {},
         "context.ledger_share: Input should be greater than or equal to 0"),
        # Literal choices and plain types.
        ("context: {strategy: fold}", {}, "context.strategy: Input should be 'auto'"),
        ("context: {auto_compact: maybe}", {},
         "context.auto_compact: Input should be a valid boolean"),
        ("context: {cooldown_turns: two}", {},
         "context.cooldown_turns: Input should be a valid integer"),
        # Unknown keys, the section's own keys, the checks across keys.
        ("context: {keep_recnet: 3}", {}, "context.keep_recnet: unknown key"),
        ("context: {learned_ttl_s: 0}", {},
         "context.learned_ttl_s: Input should be greater than 0"),
        ("context: {summary_brain: {timeout_s: 0}}", {},
         "context.summary_brain.timeout_s: Input should be greater than 0"),
        ("context: {prepare_at: 0.9}", {}, "prepare_at must be at or below compression_trigger"),
        # The same constraints on a `models:` entry (every key optional there).
        ("models: {m: {context_window: 0}}", {},
         "models.m.context_window: Input should be greater than 0"),
        ("models: {m: {safety_margin: 0.7}}", {},
         "models.m.safety_margin: Input should be less than 0.5"),
        ("models: {m: {strategy: fold}}", {}, "models.m.strategy: Input should be 'auto'"),
        ("models: {m: {keep_recnet: 3}}", {}, "models.m.keep_recnet: unknown key"),
        ("models: {m: {learned_ttl_s: 60}}", {}, "models.m.learned_ttl_s: unknown key"),
        ("models: {m: {prepare_at: 0.9}}", {},
         "models.m: prepare_at must be at or below compression_trigger"),
        # From the environment, by the same names as ever.
        ("", {"COMPACTION_PROXY_CONTEXT__COMPACTION_TARGET": "0"},
         "context.compaction_target: Input should be greater than 0 (got '0')"),
        ("", {"COMPACTION_PROXY_MODELS__LLAMA__KEEP_RECENT": "-3"},
         "models.llama.keep_recent: Input should be greater than or equal to 0"),
    ],
)  # fmt: skip
def test_bad_context_values_name_the_key(
    tmp_path: Path, text: str, env: dict[str, str], expected: str
) -> None:
    assert expected in problem(tmp_path, text, env)


HOOK = "hooks: [{{on: turn_start, condition: {condition}, action: {action}}}]\n"
LOG = "{type: log, message: x}"


@pytest.mark.parametrize(
    ("condition", "action", "expected"),
    [
        ("{type: turn_count, count: 0}", LOG,
         "hooks.0.condition.turn_count.count: Input should be greater than or equal to 1 (got 0)"),
        ("{type: context_pressure, threshold: 0}", LOG,
         "hooks.0.condition.context_pressure.threshold: Input should be greater than 0"),
        ("{type: tool_calls}", LOG, "hooks.0.condition.tool_calls.threshold: Field required"),
        ("{type: message_count, threshold: 2, every: 3}", LOG,
         "hooks.0.condition.message_count.every: unknown key"),
        ("{type: always}", "{type: compact_context, strategy: fold}",
         "hooks.0.action.compact_context.strategy: Input should be 'auto'"),
        ("{type: always}", "{type: compact_context, keep_recent: -1}",
         "hooks.0.action.compact_context.keep_recent: Input should be greater than or equal to 0"),
        ("{type: always}", "{type: inject_message, message: x, role: tool}",
         "hooks.0.action.inject_message.role: Input should be 'system'"),
        # The core's own field is not a config key.
        ("{type: always}", "{type: compact_context, force: false}", "force: unknown key"),
        ("{type: always}", "{type: shout, message: x}",
         "hooks.0.action.type: must be one of 'compact_context', 'inject_message', 'log' "
         "(got 'shout')"),
        ("{type: sometimes}", LOG, "hooks.0.condition.type: must be one of 'context_pressure'"),
        ("{type: always}", "{message: x}", "hooks.0.action: needs a type key"),
    ],
)  # fmt: skip
def test_bad_hook_values_name_the_key(
    tmp_path: Path, condition: str, action: str, expected: str
) -> None:
    assert expected in problem(tmp_path, HOOK.format(condition=condition, action=action))


# One of each condition and action; a class added to the core's unions needs one here.
EXAMPLES: list[hooks.Condition | hooks.Action] = [
    hooks.ContextPressure(0.5),
    hooks.TurnCount(3),
    hooks.ToolCalls(2),
    hooks.MessageCount(40),
    hooks.Always(),
    hooks.CompactContext("truncate", 2, 100),
    hooks.InjectMessage("Turn {turn}", "user"),
    hooks.Log("{tokens} tokens"),
]


def test_examples_cover_every_condition_and_action() -> None:
    classes = {*get_args(hooks.Condition), *get_args(hooks.Action)}
    assert {type(example) for example in EXAMPLES} == classes


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda example: type(example).__name__)
def test_each_condition_and_action_is_written_by_its_type_key(
    tmp_path: Path, example: hooks.Condition | hooks.Action
) -> None:
    keys = {"type": type_key(type(example)), **dataclasses.asdict(example)}
    keys.pop("force", None)
    is_action = isinstance(example, get_args(hooks.Action))
    hook = {"on": "turn_start", ("action" if is_action else "condition"): keys}
    if not is_action:
        hook["action"] = {"type": "log", "message": "x"}
    [rule] = load(tmp_path, yaml.safe_dump({"hooks": [hook]})).hook_rules()
    assert (rule.action if is_action else rule.condition) == example


def test_hooks_dump_and_load_back_unchanged(tmp_path: Path) -> None:
    hooks_yaml = [
        {"on": "turn_start", "condition": {"type": "turn_count", "count": 5},
         "action": {"type": "compact_context", "strategy": "summarize"}, "cooldown": 30},
        {"on": "turn_start", "action": {"type": "inject_message", "message": "hi"}},
    ]  # fmt: skip
    settings = load(tmp_path, yaml.safe_dump({"hooks": hooks_yaml}))
    dumped = [hook.model_dump(mode="json") for hook in settings.hooks]
    # The `type:` key is written back; the core's `force` is not.
    assert dumped[0]["action"] == {
        "type": "compact_context",
        "strategy": "summarize",
        "keep_recent": None,
        "summary_max_tokens": None,
    }
    assert load(tmp_path, yaml.safe_dump({"hooks": dumped})) == settings
    assert Settings.model_validate(settings.model_dump()) == settings


def test_context_change_is_validated_like_the_file() -> None:
    settings = Settings()
    changed = settings.with_context({"keep_recent": 3, "strategy": "truncate"})
    assert (changed.context.keep_recent, changed.context.strategy) == (3, "truncate")
    assert changed.model_policies().default.keep_recent == 3
    assert settings.context.keep_recent == 10  # a new value, the old one untouched
    with pytest.raises(ValueError, match="compression_trigger"):
        settings.with_context({"compression_trigger": 2})
    # A change the `models:` entries no longer agree with is refused too.
    with_model = Settings.model_validate({"models": {"m": {"compaction_target": 0.3}}})
    with pytest.raises(ValueError, match=r"models\.m: compaction_target"):
        with_model.with_context({"compression_trigger": 0.3, "compaction_target": 0.2})
