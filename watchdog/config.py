"""Watchdog configuration: a YAML file, then `VOLCANO_WATCHDOG_*` environment variables, then flags
(each overriding the one before). Every key is documented in docs/configuration.md, generated from
these models; an invalid value is one line naming the key (`ConfigError`), and the CLI exits 2.

Nested keys in the environment use `__`: `VOLCANO_WATCHDOG_DETECTORS__IDLE_WINDOW_SECONDS=900`.
"""

from __future__ import annotations

import argparse
import os
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator, model_validator

from volcano_monitor.core.flags import host_port
from volcano_monitor.watchdog.capability.settings import CapabilitySettings, Quantity
from volcano_monitor.watchdog.gpuidle.settings import GpuIdleSettings
from volcano_monitor.watchdog.node_settings import GpuStrandedSettings, NodeHotSettings
from volcano_monitor.watchdog.notify.settings import LeaderElection, Notifications, parse_duration
from volcano_monitor.watchdog.oomscale.settings import OomScaleUpSettings
from volcano_monitor.watchdog.report.cron import parse_cron
from volcano_monitor.watchdog.usage.backfill_settings import PrometheusBackfill

ENV_PREFIX = "VOLCANO_WATCHDOG_"
CLI_ONLY_ENV = {"VOLCANO_WATCHDOG_CONFIG", "VOLCANO_WATCHDOG_LOG_LEVEL"}


_SECRET_KEY = re.compile(r"url|secret|token|password|key", re.IGNORECASE)


class ConfigError(Exception):
    """Invalid configuration; the message is one line naming the key."""


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class MetricsApiSource(Section):
    """Usage from the Kubernetes metrics API (metrics.k8s.io/v1beta1 PodMetrics), polled."""

    enabled: bool = Field(default=True, description="Poll PodMetrics.")
    interval_seconds: float = Field(default=30.0, gt=0, description="Seconds between polls.")


class PrometheusSource(Section):
    """Usage from Prometheus: cAdvisor CPU and working-set memory, DCGM GPU utilisation."""

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

    @field_validator("rollup_seconds")
    @classmethod
    def _divides_an_hour(cls, value: int) -> int:
        if 3600 % value:
            raise ValueError("must divide 3600 (an hour), e.g. 60, 300 or 600")
        return value


class Retention(Section):
    """How long time-ordered data is kept; enforced every `check_interval_seconds`, in chunks of `chunk_rows`
    on a thread of its own (watchdog.retention)."""

    usage_days: float = Field(default=14, gt=0, description="Usage rollups per container.")
    jobs_days: float = Field(default=180, gt=0, description="Job ledger rows, counted from the job's finish.")
    alerts_days: float = Field(default=90, gt=0, description="Resolved alerts, counted from their resolution.")
    histograms_days: float = Field(
        default=30, gt=0, description="Recommendation histograms of a workload with no usage sample (nor OOM kill) "
                                      "for this long: a renamed or retired job.")
    check_interval_seconds: float = Field(default=3600, gt=0, description="Seconds between retention passes.")
    downsample_after_hours: float = Field(
        default=24, ge=0,
        description="5-minute usage rollups older than this are merged into hourly rows (sums and maxima kept; the "
                    "demand policy reads each hour's highest 5-minute usage). At least the JobIdle window is always "
                    "kept at 5 minutes. 0: never downsample.")
    chunk_rows: int = Field(
        default=5000, ge=100, le=1_000_000,
        description="Rows deleted or downsampled per transaction: each chunk holds the database's write lock "
                    "(SQLite) or its rows (PostgreSQL) only briefly, so the writer is never blocked for long.")


class Detectors(Section):
    """Thresholds and windows of the failure and waste detectors (DESIGN §5)."""

    gang_unschedulable_seconds: float = Field(
        default=600, ge=0,
        description="A PodGroup Pending or Inqueue this long, no pod placed, raises GangUnschedulable (not when it "
                    "only waits for its queue or the cluster to free up: that is QueueStarved)."
    )
    partial_gang_seconds: float = Field(
        default=600, ge=0, description="Some pods running while the gang is incomplete this long raises PartialGang."
    )
    idle_window_seconds: float = Field(default=1800, gt=0, description="Window over which JobIdle looks at usage.")
    idle_cpu_ratio: float = Field(
        default=0.05, gt=0, le=1, description="JobIdle when CPU used / requested stays below."
    )
    idle_gpu_util_percent: float = Field(
        default=5, ge=0, le=100, description="JobIdle (GPU) when GPU util stays below."
    )
    over_requested_ratio: float = Field(
        default=0.25, gt=0, le=1, description="OverRequested when a finished job used less than this of its request."
    )
    over_requested_min_seconds: float = Field(
        default=600, ge=0, description="OverRequested only for jobs that ran at least this long."
    )
    queue_starved_seconds: float = Field(
        default=900, ge=0,
        description="QueueStarved when demand that would fit alone waits this long because its queue (or an "
                    "ancestor) is at capability or the cluster (root queue's deserved) is full."
    )
    retrying_min_retries: int = Field(default=1, ge=1, description="JobRetrying from this many retries.")
    gpu_stranded: GpuStrandedSettings = GpuStrandedSettings()
    node_hot: NodeHotSettings = NodeHotSettings()


class ContainerPolicy(Section):
    """Caps of the recommendations of the containers it selects, like a VPA containerPolicy. Selectors are
    exact names or shell globs (`team-*`, `*`); of the policies that select a container, the most specific
    (most selectors other than `*`) applies, the first listed on a tie."""

    namespace: str = Field(default="*", max_length=253, description="Namespace selector.")
    queue: str = Field(default="*", max_length=253, description="Queue selector.")
    workload: str = Field(default="*", max_length=253, description="Workload selector.")
    container: str = Field(default="*", max_length=253, description="Container name selector.")
    min_allowed: dict[Literal["cpu", "memory"], Quantity] = Field(
        default_factory=dict, description="Lowest request recommended (quantities: `cpu: 100m`, `memory: 1Gi`).")
    max_allowed: dict[Literal["cpu", "memory"], Quantity] = Field(
        default_factory=dict, description="Highest request recommended.")

    @model_validator(mode="after")
    def _ordered(self) -> ContainerPolicy:
        for name, low in self.min_allowed.items():
            high = self.max_allowed.get(name)
            if high is not None and high < low:
                raise ValueError(f"max_allowed.{name} is below min_allowed.{name}")
        return self


class Recommendations(Section):
    """Request recommendations in the manner of the VPA recommender."""

    cpu_percentile: float = Field(default=0.9, gt=0, lt=1, description="Percentile of CPU usage for the target.")
    memory_percentile: float = Field(default=0.9, gt=0, lt=1, description="Percentile of per-interval memory peaks.")
    safety_margin: float = Field(default=0.15, ge=0, description="Added to targets (0.15 = +15%).")
    half_life_hours: float = Field(default=24, gt=0, description="Half-life of sample weights in the histograms.")
    memory_interval_hours: float = Field(default=24, gt=0, description="Interval whose memory peak is one sample.")
    oom_bump_ratio: float = Field(default=1.2, ge=1, description="After an OOM kill: at least peak x this.")
    oom_min_bump_bytes: int = Field(default=100 * 2**20, ge=0, description="After an OOM kill: at least peak + this.")
    min_cpu_cores: float = Field(default=0.025, ge=0, description="Lowest CPU recommendation.")
    min_memory_bytes: int = Field(default=250 * 2**20, ge=0, description="Lowest memory recommendation.")
    workload_label: str | None = Field(
        default=None, description="Pod label naming the workload; default: namespace + job name without its run suffix."
    )
    min_confidence: float = Field(
        default=0.14, ge=0, le=1,
        description="Below this confidence (history in days / 7) a recommendation shows no patch, only \"not enough "
                    "history\". 0.14: about a day of one-a-minute samples, the first complete daily memory peak; "
                    "before that the upper bound is more than twice the p95.")
    container_policies: list[ContainerPolicy] = Field(
        default_factory=list,
        description="Per-container caps, like the VPA's containerPolicies: each {namespace, queue, workload, "
                    "container (names or globs, default `*`), min_allowed, max_allowed ({cpu, memory} "
                    "quantities)}; the most specific match applies (docs/watchdog.md).")


class Digest(Section):
    """A report sent on a schedule to one receiver of `notifications.receivers`, with a link to its HTML
    page. Sent by the leader only, once per period (recorded in the database)."""

    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$",
                      description="Name of the digest (in the message and its record).")
    schedule: str = Field(description="5-field cron schedule in UTC, e.g. `0 9 * * mon` (Mondays 09:00).")
    receiver: str = Field(description="Receiver name from `notifications.receivers`.")
    by: Literal["queue", "namespace"] = Field(default="queue", description="Group the report by queue or namespace.")
    period: float = Field(default=7 * 86400, gt=0,
                          description="Time the digest covers, up to the scheduled time (`7d`, `24h`, or seconds).")
    top: int = Field(default=5, ge=0, le=50, description="Groups and top wasters listed in the message.")

    @field_validator("schedule")
    @classmethod
    def _cron(cls, value: str) -> str:
        parse_cron(value)  # ValueError names the field
        return value

    @field_validator("period", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> float:
        return parse_duration(value)


class Reports(Section):
    """Scheduled report digests (`volcano-watchdog report` prints the same report on demand)."""

    digests: list[Digest] = Field(
        default_factory=list,
        description="Digests to send, each {name, schedule (5-field cron, UTC), receiver, by: queue|namespace, "
                    "period (default 7d), top (default 5)} (docs/watchdog.md).")
    check_interval_seconds: float = Field(default=60, gt=0, description="Seconds between looks at the schedules.")
    max_delay_seconds: float = Field(
        default=86400, gt=0,
        description="A digest due while no leader ran is still sent if it is at most this late (else skipped).")


class Settings(Section):
    kubeconfig: str | None = Field(default=None, description="Kubeconfig file (else $KUBECONFIG, in-cluster, ~/.kube).")
    listen: str = Field(default="0.0.0.0:9747", description="HOST:PORT for the API, /metrics, /healthz, /readyz.")
    database_url: str = Field(
        default="sqlite:///volcano-watchdog.db", description="sqlite:///PATH or postgresql+psycopg://USER:PASS@HOST/DB."
    )
    api_token: SecretStr | None = Field(
        default=None, description="Bearer token required by every non-GET API endpoint (unset: those are refused)."
    )
    api_read_token: SecretStr | None = Field(
        default=None, description="Bearer token for the GET endpoints that show people's data (/api/v1/notifications "
                                  "with owners' mentions, /api/v1/silences with their authors); api_token works "
                                  "there too. Unset: only api_token opens them. Every other GET is public.")
    namespaces: list[str] = Field(default_factory=list, description="Namespaces to watch (empty: all).")
    grafana_url: str | None = Field(default=None, description="Grafana base URL, for links in messages.")
    sources: Sources = Sources()
    retention: Retention = Retention()
    detectors: Detectors = Detectors()
    recommendations: Recommendations = Recommendations()
    notifications: Notifications = Notifications()
    leader_election: LeaderElection = LeaderElection()
    capability: CapabilitySettings = CapabilitySettings()
    oom_scale_up: OomScaleUpSettings = OomScaleUpSettings()
    reports: Reports = Reports()
    gpu_idle: GpuIdleSettings = GpuIdleSettings()

    @model_validator(mode="after")
    def _idle_window_holds_rollups(self) -> Settings:
        """JobIdle judges whole rollups: a window shorter than two of them never sees a full one."""
        window, width = self.detectors.idle_window_seconds, self.sources.rollup_seconds
        if window < 2 * width:
            raise ValueError(f"detectors.idle_window_seconds ({window:g}) must be at least twice "
                             f"sources.rollup_seconds ({width}): JobIdle could never fire; widen the window or "
                             "narrow the rollups")
        return self

    @field_validator("listen")
    @classmethod
    def _host_port(cls, value: str) -> str:
        try:
            host_port(value)
        except argparse.ArgumentTypeError as exc:
            raise ValueError(str(exc)) from None
        return value

    @model_validator(mode="after")
    def _digest_receivers(self) -> Settings:
        names = {r.name for r in self.notifications.receivers}
        digests = [d.name for d in self.reports.digests]
        for i, digest in enumerate(self.reports.digests):
            if digest.receiver not in names:
                raise ValueError(f"reports.digests[{i}].receiver: no receiver named {digest.receiver!r}")
            if digests.count(digest.name) > 1:
                raise ValueError(f"reports.digests[{i}].name: {digest.name!r} is used twice")
        return self

    @field_validator("database_url")
    @classmethod
    def _known_database(cls, value: str) -> str:
        if not value.startswith(("sqlite:///", "postgresql+psycopg://", "postgresql://")):
            raise ValueError("must start with sqlite:/// or postgresql+psycopg://")
        return value


def _describe(error: ValidationError) -> str:
    first = error.errors()[0]
    key = ".".join(str(part) for part in first["loc"])
    text = first["msg"].removeprefix("Value error, ")
    message = f"{key}: {text}" if key else text  # a check across keys names them itself
    # Show what was given only when it is a plain value that cannot be a credential (webhook URLs
    # carry tokens; a section's dict would carry them too).
    given = first.get("input")
    if isinstance(given, str | int | float | bool) and not _SECRET_KEY.search(key):
        message += f" (got {given!r:.80})"
    return message


def _deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def env_overrides(environ: dict[str, str] | None = None) -> dict[str, Any]:
    """`VOLCANO_WATCHDOG_*` variables as a nested dict (`__` separates levels). Variables that only
    the command line reads (config file, log level) are not settings."""
    out: dict[str, Any] = {}
    for name, value in (os.environ if environ is None else environ).items():
        if not name.startswith(ENV_PREFIX) or name in CLI_ONLY_ENV:
            continue
        path = name[len(ENV_PREFIX) :].lower().split("__")
        node = out
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = value.split(",") if path == ["namespaces"] else value
    return out


def load(config_file: str | Path | None = None, environ: dict[str, str] | None = None, **flags: Any) -> Settings:
    """Settings from the YAML file, then the environment, then flags (a None flag is "not given")."""
    from_file: dict[str, Any] = {}
    if config_file:
        path = Path(config_file)
        try:
            loaded = yaml.safe_load(path.read_text()) or {}
        except OSError as exc:
            raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from exc
        except yaml.YAMLError as exc:
            raise ConfigError(f"config file {path} is not valid YAML: {str(exc).splitlines()[0]}") from exc
        if not isinstance(loaded, dict):
            raise ConfigError(f"config file {path} must hold a mapping of keys, not {type(loaded).__name__}")
        from_file = loaded
    given = {k: v for k, v in flags.items() if v is not None}
    try:
        return Settings(**_deep_merge(_deep_merge(from_file, env_overrides(environ)), given))
    except ValidationError as exc:
        raise ConfigError(_describe(exc)) from None
