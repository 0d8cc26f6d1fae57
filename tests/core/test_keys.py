"""Client keys: held as hashes, looked up by the key a caller presents."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.core.keys import ClientKeys, configured_hash, key_hash, presented_key, tenant_name
from proxy.core.session import tenant_of, tenant_of_name


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def test_key_hash_is_prefixed_sha256() -> None:
    assert key_hash("sk-team-a") == f"sha256:{sha256('sk-team-a')}"


def test_configured_hash_keeps_a_hash_and_hashes_a_plain_key() -> None:
    digest = sha256("sk-team-a")
    assert configured_hash(f"sha256:{digest}") == f"sha256:{digest}"
    assert configured_hash(f"SHA256:{digest.upper()}") == f"sha256:{digest}"
    assert configured_hash("sk-team-a") == f"sha256:{digest}"


@pytest.mark.parametrize("entry", ["sha256:abc", "sha256:" + "g" * 64, "", "   "])
def test_configured_hash_refuses_malformed_entries_without_naming_them(entry: str) -> None:
    with pytest.raises(ValueError, match=r"^(a sha256|a key)") as raised:
        configured_hash(entry)
    assert entry.strip() == "" or entry not in str(raised.value)


@pytest.mark.parametrize("name", ["team-a", "A", "ops.eu_1", "x" * 64])
def test_tenant_names_accepted(name: str) -> None:
    assert tenant_name(name) == name


@pytest.mark.parametrize("name", ["", "-a", "team a", "x" * 65, "a/b", "é"])
def test_tenant_names_refused(name: str) -> None:
    with pytest.raises(ValueError, match="tenant name"):
        tenant_name(name)


@pytest.mark.parametrize(
    ("credentials", "key"),
    [
        ([("Authorization", "Bearer sk-1")], "sk-1"),
        ([("authorization", "bearer  sk-1 ")], "sk-1"),
        ([("api-key", "sk-2")], "sk-2"),
        ([("Authorization", "Bearer sk-1"), ("api-key", "sk-2")], "sk-1"),
        ([("x-api-key", "sk-ant-4")], "sk-ant-4"),
        ([("x-api-key", "sk-ant-4"), ("api-key", "sk-2")], "sk-2"),
        ([("x-api-key", "sk-ant-4"), ("Authorization", "Bearer sk-1")], "sk-1"),
        ([("Authorization", "Bearer sk-1"), ("Authorization", "Bearer sk-3")], "sk-1"),
        ([("Authorization", "Basic dTpw")], None),
        ([("openai-organization", "org-1")], None),
        ([], None),
    ],
)
def test_presented_key(credentials: list[tuple[str, str]], key: str | None) -> None:
    assert presented_key(credentials) == key


def test_client_keys_name_tenants_by_hash() -> None:
    keys = ClientKeys({key_hash("sk-a"): "team-a", key_hash("sk-b"): "team-b"})
    assert keys.tenant_for("sk-a") == "team-a"
    assert keys.tenant_for("sk-b") == "team-b"
    assert keys.tenant_for("sk-c") is None
    assert keys.tenant_for("") is None
    assert keys.tenant_for(None) is None


@given(st.text(min_size=1, max_size=30))
def test_named_tenants_never_coincide_with_credential_tenants(name: str) -> None:
    assert tenant_of_name(name) != tenant_of(name)
