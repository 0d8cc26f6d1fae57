"""The Kubernetes examples (deploy/kubernetes): valid against the Kubernetes schema, and
every proxy container's settings accepted by the proxy itself, as `serve` would read them."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from proxy.settings import load_settings
from tests import optional

ROOT = Path(__file__).resolve().parents[1]
MANIFESTS = sorted((ROOT / "deploy" / "kubernetes").glob("*.yaml"))
KUBERNETES = "1.30.0"
# `$(NAME)` in a container's env refers to an earlier variable of the same container.
_REFERENCE = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def _documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def _pod_spec(doc: dict[str, Any]) -> dict[str, Any] | None:
    if doc["kind"] == "Pod":
        spec: dict[str, Any] = doc["spec"]
        return spec
    template = doc.get("spec", {}).get("template")
    return template["spec"] if template else None


def _proxy_containers() -> list[tuple[str, dict[str, Any]]]:
    found = []
    for path in MANIFESTS:
        for doc in _documents(path):
            spec = _pod_spec(doc)
            for container in (spec or {}).get("containers", []):
                if container["image"].startswith("compaction-proxy:"):
                    found.append((f"{path.name}:{doc['kind']}", container))
    return found


def test_there_are_examples_of_each_deployment() -> None:
    names = {path.name for path in MANIFESTS}
    assert {"sidecar.yaml", "shared.yaml", "redis-cluster.yaml", "redis-sentinel.yaml"} <= names


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda path: path.name)
def test_every_manifest_is_valid_kubernetes(path: Path) -> None:
    validator = optional.module(
        "kubernetes_validate", "pip install kubernetes-validate (a dev dependency: make test)"
    )
    for doc in _documents(path):
        # Strict: an unknown or misspelt field is an error, not silently ignored by the API.
        validator.validate(doc, KUBERNETES, strict=True)


@pytest.mark.parametrize(
    ("where", "container"),
    _proxy_containers(),
    ids=lambda value: value if isinstance(value, str) else "",
)
def test_every_proxy_container_is_configured_as_the_proxy_reads_it(
    where: str, container: dict[str, Any]
) -> None:
    environ: dict[str, str] = {}
    for variable in container.get("env", []):
        value = variable.get("value", "secret-value")  # a secretKeyRef: any string
        environ[variable["name"]] = _REFERENCE.sub(lambda m: environ.get(m[1], ""), value)
    settings = load_settings(ROOT / "config" / "proxy.yaml", environ=environ)
    assert settings.server.port == container["ports"][0]["containerPort"] == 8080
    mode = environ.get("COMPACTION_PROXY_REDIS__MODE", "single")
    assert settings.redis.mode == mode, where
    if mode == "sentinel":
        assert settings.redis.sentinel_master
        assert len(settings.redis.sentinels) == 3
    if "sidecar" in where:
        # Loopback only: nothing but the pod's own containers reaches it.
        assert settings.server.host == "127.0.0.1"
        assert not settings.redis.url  # the embedded store
    else:
        assert settings.redis.url.startswith("redis://")


def test_the_image_is_the_one_docker_compose_builds() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    image = compose["services"]["proxy"]["image"]
    assert {container["image"] for _, container in _proxy_containers()} == {image}
