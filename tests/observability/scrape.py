"""Reading `/metrics` the way Prometheus does, into a lookup by name and labels."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


async def scrape(http: httpx.AsyncClient) -> Samples:
    """Every sample `/metrics` exposes, parsed by prometheus-client's own parser."""
    response = await http.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    """The sample `name{labels}`, 0 when it was never exposed (a counter not yet touched)."""
    return samples.get((f"compaction_proxy_{name}", frozenset(labels.items())), 0.0)


def total(samples: Samples, name: str) -> float:
    """The sum of `name` over all its label values."""
    wanted = f"compaction_proxy_{name}"
    return sum(found for (sample, _), found in samples.items() if sample == wanted)
