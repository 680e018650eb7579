"""Settings of the usage sources (`sources:`): the metrics API, Prometheus (with its history backfill) and the
width of the stored rollups."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, SecretStr, field_validator

from volcano_monitor.core.settings import Section
from volcano_monitor.watchdog.findings.recommendations.backfill_settings import PrometheusBackfill


class MetricsApiSource(Section):
    """Usage from the Kubernetes metrics API (metrics.k8s.io/v1beta1 PodMetrics), polled."""

    enabled: bool = Field(default=True, description="Poll PodMetrics.")
    interval_seconds: float = Field(default=30.0, gt=0, description="Seconds between polls.")


class PrometheusSource(Section):
    """Usage from Prometheus: cAdvisor CPU and working-set memory, DCGM GPU utilisation, HAMi's per-container vGPU
    utilisation (docs/gpu-sharing.md, "Usage on shared cards")."""

    enabled: bool = Field(default=False, description="Query Prometheus.")
    url: str = Field(default="http://localhost:9090", description="Prometheus base URL.")
    interval_seconds: float = Field(default=60.0, gt=0, description="Seconds between query rounds.")
    timeout_seconds: float = Field(default=10.0, gt=0, description="Timeout of one query.")
    rate_window: str = Field(default="5m", pattern=r"^[0-9]+[smhd]$", description="Range for rate() over CPU counters.")
    gpu: bool = Field(default=True, description="Query DCGM_FI_DEV_GPU_UTIL for GPU utilisation.")
    dcgm_labels: Literal["auto", "namespace", "exported"] = Field(
        default="auto",
        description="How this Prometheus labels DCGM series with the GPU's pod: `namespace` (namespace/pod/container, "
                    "scraped with honorLabels), `exported` (exported_namespace/exported_pod/exported_container: the "
                    "scrape target's own labels won), or `auto`: asked of Prometheus (the style with more series), "
                    "again every 60 rounds.")
    hami: bool = Field(
        default=True,
        description="Query the vGPU monitor (HAMi's, or Volcano's vgpu-monitor) for the GPU usage on shared cards: "
                    "HAMi's per-container utilisation of each vGPU (taken over DCGM's), and which container holds a "
                    "vGPU on which card, to split DCGM's per-card utilisation across the pods sharing it.")
    hami_metrics: Literal["auto", "legacy", "current", "exported"] = Field(
        default="auto",
        description="Which names HAMi's monitor uses: `legacy` (Device_utilization_desc_of_container with "
                    "podnamespace/podname/ctrname, HAMi up to 2.x and `--legacy-metrics`), `current` "
                    "(hami_container_device_utilization_ratio with namespace/pod/container, scraped with "
                    "honorLabels), `exported` (the same, exported_namespace/exported_pod/exported_container), or "
                    "`auto`: asked of Prometheus (the one with more memory-limit series), again every 60 rounds.")
    bearer_token: SecretStr | None = Field(default=None, description="Bearer token for Prometheus, if it needs one.")
    backfill: PrometheusBackfill = PrometheusBackfill()


class Sources(Section):
    """Where usage comes from; each source is optional."""

    metrics_api: MetricsApiSource = MetricsApiSource()
    prometheus: PrometheusSource = PrometheusSource()
    rollup_seconds: int = Field(
        default=300, ge=1, le=3600,
        description="Width of the stored usage rollups (one row per container and width). It must divide an hour "
                    "(rollups are downsampled to hourly rows) and the JobIdle window must hold at least two; "
                    "short only for demos and tests: the row count grows as it shrinks.")
    flush_interval_seconds: float = Field(
        default=15, gt=0, le=300,
        description="Seconds between stores of the usage held in memory (rollups, ledger usage, histograms): what "
                    "a kill -9 of the leader loses at most. OverRequested waits four of them after a run ends, so "
                    "its last usage is in.")

    @field_validator("rollup_seconds")
    @classmethod
    def _divides_an_hour(cls, value: int) -> int:
        if 3600 % value:
            raise ValueError("must divide 3600 (an hour), e.g. 60, 300 or 600")
        return value
