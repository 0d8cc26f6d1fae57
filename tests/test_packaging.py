"""The files that ship the proxy agree with it: compose and the image use real settings keys."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from proxy.settings import ENV_PREFIX, load_settings

REPO = Path(__file__).resolve().parent.parent


def _compose() -> dict[str, dict[str, dict[str, object]]]:
    compose: dict[str, dict[str, dict[str, object]]] = yaml.safe_load(
        (REPO / "docker-compose.yml").read_text()
    )
    return compose


def _substitute_defaults(value: str) -> str:
    # ${NAME:-default} as docker compose would with NAME unset.
    return re.sub(r"\$\{[A-Z_]+:-([^}]*)\}", r"\1", value)


def test_compose_environment_is_valid_settings() -> None:
    environment = _compose()["services"]["proxy"]["environment"]
    assert isinstance(environment, dict)
    env = {name: _substitute_defaults(str(value)) for name, value in environment.items()}
    assert all(name.startswith(ENV_PREFIX) for name in env)
    settings = load_settings(REPO / "config" / "proxy.yaml", environ=env)
    assert settings.redis.url == "redis://redis:6379/0"
    assert settings.upstream.api_key is None  # unset key: clients' own credentials forwarded


def test_compose_redis_is_persistent_and_checked() -> None:
    services = _compose()["services"]
    redis = services["redis"]
    assert str(redis["image"]).startswith("redis:7.")
    assert "--appendonly" in list(redis["command"])  # type: ignore[call-overload]
    assert any(str(volume).endswith(":/data") for volume in redis["volumes"])  # type: ignore[attr-defined]
    assert "healthcheck" in redis
    assert "healthcheck" in services["proxy"]


def test_image_is_pinned_unprivileged_and_offline_ready() -> None:
    dockerfile = (REPO / "Dockerfile").read_text()
    bases = re.findall(r"^FROM (\S+)", dockerfile, flags=re.MULTILINE)
    assert bases
    assert all(re.fullmatch(r"python:\d+\.\d+\.\d+-slim-\w+", base) for base in bases)
    assert re.search(r"^USER (?!root)\w+", dockerfile, flags=re.MULTILINE)
    assert "HEALTHCHECK" in dockerfile
    # Exact counts with no download, checked at build time, without what the proxy never reads.
    assert "exact_offline()" in dockerfile
    assert "pip uninstall --yes numpy" in dockerfile
    assert "COPY config/proxy.yaml /app/config/proxy.yaml" in dockerfile
    assert '"--config", "/app/config/proxy.yaml"' in dockerfile
