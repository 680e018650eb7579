"""Serving the object shapes of one Volcano release (`volcano-sim --volcano-release v1.12`).

Driven by Volcano's own CRDs (../shared/volcano/crds-by-release/<tag>/, and ../shared/volcano/crds/ for
the newest, treated as v1.16), as a real cluster would be:

- **which kinds are served**: a kind whose CRD the release does not ship answers 404 (list, watch,
  discovery): HyperNode before v1.12, CronJob before v1.13. JobFlow ships in every release.
- **which fields objects carry**: the API server prunes every field the CRD's structural schema does
  not list (`x-kubernetes-preserve-unknown-fields` aside), silently. The simulator writes the newest
  shapes and the release's schema prunes them, so a v1.9 Queue loses `spec.priority`, a v1.11
  PodGroup `spec.networkTopology`, a v1.13 PodGroup `spec.subGroupPolicy`.

The newest directory holds only the Job, PodGroup and Queue CRDs; the other kinds take v1.15.1's.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from volcano_monitor.simulator.resources import (
    BASE_TYPES,
    COMMANDS,
    CRONJOBS,
    HYPERNODES,
    JOBFLOWS,
    JOBS,
    PODGROUPS,
    QUEUES,
    ResourceType,
)
from volcano_monitor.simulator.store import Store

Obj = dict[str, Any]

# Release name -> directory under crds-by-release ("" = ../crds, the newest).
RELEASES = {
    "v1.9": "v1.9.1", "v1.10": "v1.10.2", "v1.11": "v1.11.2", "v1.12": "v1.12.4", "v1.13": "v1.13.3",
    "v1.14": "v1.14.4", "v1.15": "v1.15.1", "v1.16": "",
}
NEWEST_FALLBACK = "v1.15.1"  # for the kinds ../crds does not hold
CRD_FILES = {
    JOBS: "batch.volcano.sh_jobs.yaml",
    PODGROUPS: "scheduling.volcano.sh_podgroups.yaml",
    QUEUES: "scheduling.volcano.sh_queues.yaml",
    JOBFLOWS: "flow.volcano.sh_jobflows.yaml",
    HYPERNODES: "topology.volcano.sh_hypernodes.yaml",
    CRONJOBS: "batch.volcano.sh_cronjobs.yaml",
    COMMANDS: "bus.volcano.sh_commands.yaml",
}
ENV_CRDS = "VOLCANO_SIM_CRDS"


def release_name(text: str) -> str:
    """`v1.12`, `1.12`, `v1.12.4` -> `v1.12`; ValueError for a release we have no CRDs for."""
    parts = text.strip().removeprefix("v").split(".")
    name = "v" + ".".join(parts[:2])
    if name not in RELEASES:
        raise ValueError(f"unknown Volcano release {text!r} (known: {', '.join(RELEASES)})")
    return name


def volcano_dir() -> Path:
    """`shared/volcano` (or $VOLCANO_SIM_CRDS): the nearest one above this package or the working directory."""
    if os.environ.get(ENV_CRDS):
        return Path(os.environ[ENV_CRDS])
    for start in (Path(__file__).resolve(), Path.cwd().resolve()):
        for parent in start.parents:
            candidate = parent / "shared" / "volcano"
            if (candidate / "crds-by-release").is_dir():
                return candidate
    raise FileNotFoundError(f"Volcano's CRDs not found (shared/volcano/crds-by-release); set {ENV_CRDS}")


def crd_path(release: str, rtype: ResourceType, root: Path | None = None) -> Path | None:
    """The CRD file of `rtype` in `release`, or None when the release does not ship the kind."""
    base = root or volcano_dir()
    tag = RELEASES[release_name(release)]
    path = (base / "crds-by-release" / tag if tag else base / "crds") / CRD_FILES[rtype]
    if not tag and not path.exists():
        path = base / "crds-by-release" / NEWEST_FALLBACK / CRD_FILES[rtype]
    return path if path.exists() else None


@cache
def _schema(path: Path, version: str) -> Obj:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    crd = yaml.load(path.read_text(), Loader=loader)  # a safe loader (the C one when built)
    for served in crd["spec"]["versions"]:
        if served["name"] == version:
            schema: Obj = served["schema"]["openAPIV3Schema"]
            return schema
    raise ValueError(f"{path.name} has no version {version}")


def prune(value: Any, schema: Obj) -> Any:
    """Drop what the structural schema does not list, in place, as the API server does."""
    if isinstance(value, dict):
        if schema.get("x-kubernetes-preserve-unknown-fields"):
            return value
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        if props is not None:
            for key in [k for k in value if k not in props]:
                del value[key]
            for key, sub in value.items():
                prune(sub, props[key])
        elif isinstance(extra, dict):
            for sub in value.values():
                prune(sub, extra)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for item in value:
            prune(item, schema["items"])
    return value


def _pruner(schema: Obj) -> Callable[[Obj], None]:
    props = schema.get("properties", {})

    def apply(obj: Obj) -> None:
        for key in ("spec", "status"):  # metadata, apiVersion and kind are the server's own
            if key in obj and key in props:
                prune(obj[key], props[key])

    return apply


@dataclass(frozen=True)
class Release:
    name: str
    types: tuple[ResourceType, ...]  # what the API server serves
    pruners: dict[ResourceType, Callable[[Obj], None]]


def load_release(text: str, root: Path | None = None) -> Release:
    name = release_name(text)
    served: list[ResourceType] = list(BASE_TYPES)
    pruners = {}
    for rtype in CRD_FILES:
        path = crd_path(name, rtype, root)
        if path is None:
            continue
        if rtype not in served:
            served.append(rtype)
        pruners[rtype] = _pruner(_schema(path, rtype.version))
    return Release(name, tuple(served), pruners)


def release_store(release: str | None, **options: Any) -> Store:
    """A store serving `release`'s kinds and pruning to its schemas; None: the default (no pruning, no
    newer kinds: Jobs, PodGroups and Queues as the simulator writes them)."""
    if release is None:
        return Store(**options)
    loaded = load_release(release)
    store = Store(loaded.types, **options)
    store.pruners.update(loaded.pruners)
    return store
