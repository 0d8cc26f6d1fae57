"""Per-model context policies."""

from __future__ import annotations

import pytest

from proxy.core.policy import ContextPolicy, ModelPolicies

DEFAULT = ContextPolicy(context_window=8192)
POLICIES = ModelPolicies(
    default=DEFAULT,
    overrides={
        "gpt-4o": DEFAULT.replace(context_window=128_000),
        "gpt-4o*": DEFAULT.replace(context_window=64_000),
        "*": DEFAULT.replace(keep_recent=3),
        "Qwen/Qwen3-8B": DEFAULT.replace(strategy="truncate"),
    },
)


@pytest.mark.parametrize(
    ("model", "window", "keep_recent"),
    [
        ("gpt-4o", 128_000, 10),  # an exact name wins over patterns
        ("GPT-4o", 128_000, 10),  # names match case-insensitively
        ("gpt-4o-mini", 64_000, 10),  # the most specific pattern wins
        ("llama-3", 8192, 3),
    ],
)
def test_lookup_order(model: str, window: int, keep_recent: int) -> None:
    policy = POLICIES.for_model(model)
    assert (policy.context_window, policy.keep_recent) == (window, keep_recent)


def test_missing_model_gets_default() -> None:
    assert POLICIES.for_model(None) is DEFAULT
    assert ModelPolicies(default=DEFAULT).for_model("anything") is DEFAULT


def test_mixed_case_keys_match() -> None:
    assert POLICIES.for_model("qwen/qwen3-8b").strategy == "truncate"


def test_replace_keeps_other_fields() -> None:
    changed = DEFAULT.replace(keep_recent=2)
    assert (changed.keep_recent, changed.context_window) == (2, 8192)


def test_configured_window_only_from_models_entries() -> None:
    policies = ModelPolicies(
        default=DEFAULT, overrides={"m*": DEFAULT}, windows={"M-Large": 32_000, "m*": 8_000}
    )
    assert policies.configured_window("m-large") == 32_000
    assert policies.configured_window("m-small") == 8_000
    assert policies.configured_window("other") is None
    assert policies.configured_window(None) is None


def test_check_accepts_a_consistent_policy() -> None:
    DEFAULT.check()
    DEFAULT.replace(prepare_at=0.85).check()  # at the trigger is allowed


@pytest.mark.parametrize(
    ("changes", "problem"),
    [
        ({"compaction_target": 0.85}, "compaction_target must be below compression_trigger"),
        ({"compression_trigger": 0.4}, "compaction_target must be below compression_trigger"),
        ({"prepare_at": 0.9}, "prepare_at must be at or below compression_trigger"),
    ],
)
def test_check_refuses_contradicting_fields(changes: dict[str, float], problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        DEFAULT.replace(**changes).check()
