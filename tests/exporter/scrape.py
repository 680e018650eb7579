"""Reading scrape output back, strictly, with prometheus_client's parser."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

Series = tuple[str, frozenset[tuple[str, str]]]


def parse(text: str | bytes) -> dict[Series, float]:
    """Every sample, keyed by name and label set; fails on a duplicate series or a family split in two."""
    if isinstance(text, bytes):
        text = text.decode()
    samples: dict[Series, float] = {}
    seen_families: set[str] = set()
    for family in text_string_to_metric_families(text):
        assert family.name not in seen_families, f"family {family.name} appears twice"
        seen_families.add(family.name)
        for sample in family.samples:
            key = (sample.name, frozenset(sample.labels.items()))
            assert key not in samples, f"duplicate series {key}"
            samples[key] = sample.value
    return samples


def select(samples: dict[Series, float], name: str, **labels: str) -> dict[frozenset[tuple[str, str]], float]:
    """Samples of one metric whose labels include `labels`."""
    wanted = set(labels.items())
    return {lbls: v for (n, lbls), v in samples.items() if n == name and wanted <= lbls}


def value(samples: dict[Series, float], name: str, **labels: str) -> float:
    found = select(samples, name, **labels)
    assert len(found) == 1, f"{name}{labels}: expected one series, found {sorted(map(dict, found))}"
    return next(iter(found.values()))


# What a process counted since it started (histograms, counters): two exporters differ there by design.
HISTORY = ("volcano_exporter_", "volcano_queue_job_wait_duration_seconds_", "volcano_queue_job_run_duration_seconds_",
           "volcano_pod_evictions_total")


def without_self_metrics(text: bytes) -> list[str]:
    """The state part of a scrape, sorted: comparable between two exporters of the same cluster."""
    return sorted(line for line in text.decode().splitlines()
                  if line and not line.startswith("#") and not line.startswith(HISTORY))
