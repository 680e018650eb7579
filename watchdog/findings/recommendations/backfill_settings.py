"""Configuration of the usage back-fill from Prometheus (`sources.prometheus.backfill`)."""

from __future__ import annotations

from pydantic import Field, model_validator

from volcano_monitor.core.settings import Section

MAX_POINTS_PER_SERIES = 11_000  # Prometheus refuses range queries with more points per series


class PrometheusBackfill(Section):
    """History for recommendations from Prometheus range queries, once per workload, for workloads whose stored
    history is shorter than `min_history_days` (a new install, a new workload): leader only, recorded in
    `workload_backfills` so a restart or another replica never adds the same samples twice. Reads the Prometheus of
    `sources.prometheus` (url, bearer_token, timeout_seconds, rate_window), whether or not its live collection
    (`sources.prometheus.enabled`) is on."""

    enabled: bool = Field(default=False, description="Back-fill recommendation histograms from Prometheus.")
    days: float = Field(default=8, gt=0, le=90, description="How far back to read, in days.")
    min_history_days: float = Field(
        default=1, ge=0, le=90,
        description="A workload qualifies while every container of it has less stored history than this (days, "
                    "as recommendations count it); 0: only workloads with none at all.")
    step_seconds: int = Field(
        default=300, ge=15, le=3600,
        description="Resolution of the CPU range query: one point per step stands for step/60 one-a-minute "
                    "samples. Memory is read as each `recommendations.memory_interval_hours` interval's peak.")
    chunk_hours: float = Field(
        default=24, gt=0, le=24 * 90,
        description="Time span of one range query: bounds what Prometheus returns at once (series x points).")
    batch_workloads: int = Field(
        default=50, ge=1, le=1000,
        description="Workloads per query: one query selects all their pods by a regex over pod names (and the "
                    "namespaces by a set), never one query per pod.")
    interval_seconds: float = Field(
        default=600, gt=0, description="Seconds between looks for workloads that qualify (new ones appear).")

    @model_validator(mode="after")
    def _bounded_chunks(self) -> PrometheusBackfill:
        points = self.chunk_hours * 3600 / self.step_seconds
        if points > MAX_POINTS_PER_SERIES:
            raise ValueError(f"chunk_hours ({self.chunk_hours:g}) / step_seconds ({self.step_seconds}) gives "
                             f"{points:.0f} points per series; Prometheus allows {MAX_POINTS_PER_SERIES}: "
                             "shorten the chunks or widen the step")
        return self
