"""Watchdog configuration, the root of the settings: a YAML file, then `VOLCANO_WATCHDOG_*` environment
variables, then flags (each overriding the one before). Every key is documented in docs/configuration.md, generated from
these models; an invalid value is one line naming the key (`ConfigError`), and the CLI exits 2.

Each section's model lives with the part it configures (`watchdog/*/settings.py`, `*_settings.py`); this
module puts them together under `Settings`, loads and reports errors. Settings modules import only core and
one another, so every layer may read them (tests/test_architecture.py).

Nested keys in the environment use `__`: `VOLCANO_WATCHDOG_DETECTORS__IDLE_WINDOW_SECONDS=900`.
"""

from __future__ import annotations

import argparse
import os
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator

from volcano_monitor.core.flags import host_port
from volcano_monitor.core.settings import Section
from volcano_monitor.watchdog.actions.capability.settings import CapabilitySettings
from volcano_monitor.watchdog.actions.gpu_idle.settings import GpuIdleSettings
from volcano_monitor.watchdog.actions.notify.settings import Notifications
from volcano_monitor.watchdog.actions.oomscale.settings import OomScaleUpSettings
from volcano_monitor.watchdog.findings.detectors.settings import Detectors
from volcano_monitor.watchdog.findings.recommendations.settings import Recommendations
from volcano_monitor.watchdog.runtime.settings import ClusterSettings, LeaderElection, Retention
from volcano_monitor.watchdog.sources.settings import Sources
from volcano_monitor.watchdog.state.cost_settings import Costs
from volcano_monitor.watchdog.state.gpu_settings import GpuSharing
from volcano_monitor.watchdog.views.auth_settings import AuthSettings
from volcano_monitor.watchdog.views.report.settings import Reports

ENV_PREFIX = "VOLCANO_WATCHDOG_"
CLI_ONLY_ENV = {"VOLCANO_WATCHDOG_CONFIG", "VOLCANO_WATCHDOG_LOG_LEVEL"}


_SECRET_KEY = re.compile(r"url|secret|token|password|key", re.IGNORECASE)


class ConfigError(Exception):
    """Invalid configuration; the message is one line naming the key."""


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
    cluster: ClusterSettings = ClusterSettings()
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
    costs: Costs = Costs()
    auth: AuthSettings = AuthSettings()
    gpu_sharing: GpuSharing = GpuSharing()

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
