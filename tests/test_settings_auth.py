"""The `auth:` section: keys from the file or the environment, held hashed, never echoed."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from proxy.core.keys import ClientKeys
from proxy.errors import ConfigError
from proxy.settings import Settings, load_settings

PLAIN = "sk-plain-team-key-9c1e"
HASHED = "sha256:" + hashlib.sha256(b"sk-other-team-key").hexdigest()


def test_keys_unset_by_default_check_nothing() -> None:
    assert Settings().auth.client_keys() is None


def test_file_keys_plain_and_hashed(tmp_path: Path) -> None:
    path = tmp_path / "proxy.yaml"
    path.write_text(f'auth:\n  keys:\n    "{HASHED}": team-a\n    {PLAIN}: team-b\n')
    keys = load_settings(path, environ={}).auth.client_keys()
    assert isinstance(keys, ClientKeys)
    assert keys.tenant_for("sk-other-team-key") == "team-a"
    assert keys.tenant_for(PLAIN) == "team-b"
    assert PLAIN not in repr(keys)


def test_empty_keys_in_the_file_are_none(tmp_path: Path) -> None:
    path = tmp_path / "proxy.yaml"
    path.write_text("auth:\n  keys:\n")
    assert load_settings(path, environ={}).auth.client_keys() is None


def test_environment_gives_the_whole_map_as_json(tmp_path: Path) -> None:
    path = tmp_path / "proxy.yaml"
    path.write_text(f"auth:\n  keys:\n    {PLAIN}: team-b\n")
    environ = {"COMPACTION_PROXY_AUTH__KEYS": json.dumps({HASHED: "team-a"})}
    keys = load_settings(path, environ=environ).auth.client_keys()
    assert keys is not None
    # Nested mappings merge: the file's key stays, the environment's joins it.
    assert (keys.tenant_for(PLAIN), keys.tenant_for("sk-other-team-key")) == ("team-b", "team-a")


@pytest.mark.parametrize(
    ("keys", "problem"),
    [
        ({PLAIN: "team b"}, "tenant name 'team b'"),
        ({"sha256:abc": "team-a"}, "64 hex digits"),
        (
            {PLAIN: "team-a", "sha256:" + hashlib.sha256(PLAIN.encode()).hexdigest(): "team-b"},
            "two tenants",
        ),
        ({PLAIN: 3}, "must be strings"),
        ([PLAIN], "must map API keys"),
    ],
)
def test_bad_keys_are_reported_without_the_key(keys: object, problem: str) -> None:
    with pytest.raises(ConfigError, match=problem) as raised:
        load_settings(None, overrides={"auth": {"keys": keys}}, environ={})
    assert "auth.keys" in str(raised.value)
    assert PLAIN not in str(raised.value)


def test_unknown_auth_key_is_an_error() -> None:
    with pytest.raises(ConfigError, match=r"auth\.tokens: unknown key"):
        load_settings(None, overrides={"auth": {"tokens": {}}}, environ={})
