"""HAMi's vGPU monitor (`hami-device-plugin`'s vGPUmonitor, port 31992) as read from Prometheus: which of its
naming schemes this Prometheus holds, and the per-device series of each container.

What HAMi exposes per container and vGPU (cmd/vGPUmonitor/metrics.go, checked in Project-HAMi/HAMi):

| meaning | `legacy` name (HAMi <= 2.x; later `--legacy-metrics`) | `current` name |
|---|---|---|
| SM utilisation | `Device_utilization_desc_of_container` | `hami_container_device_utilization_ratio` |
| memory used | `vGPU_device_memory_usage_in_bytes` | `hami_vgpu_memory_used_bytes` |
| memory limit | `vGPU_device_memory_limit_in_bytes` | `hami_vgpu_memory_limit_bytes` |
| labels | `podnamespace, podname, ctrname, vdeviceid, deviceuuid` | `namespace, pod, container, vdevice_index,
device_uuid` |

plus `zone="vGPU"` on all, and per card `HostCoreUtilization` / `hami_host_gpu_utilization_ratio`.

Why the utilisation is a share of the PHYSICAL card: the monitor sums, per vGPU, the `smUtil` HAMi-core records
for each process of the container, which is NVML's per-process utilisation (nvmlDeviceGetProcessUtilization),
a percentage of the whole device. A container limited to `gpucores: 25` that runs flat out reads about 25,
not 100. So `value / 100` is the physical GPUs it keeps busy on that card, with no knowledge of its share.

Why three styles: the `current` names carry `namespace/pod/container` like DCGM's, so scraped without
honorLabels they become `exported_*` (the monitor's own pod wins); the legacy names never collide.
`auto` asks Prometheus which style has more series (`style_query`), as for DCGM.

Volcano's vGPU device plugin runs its own monitor (Project-HAMi/volcano-vgpu-device-plugin, cmd/vgpu-monitor) with
the legacy memory names and labels but no per-container utilisation: there the memory series only say which
container holds a vGPU on which card (`members_query`), and the usage comes from DCGM's card, split.

Why a series may be missing: HAMi-core writes a container's shared region only once the container uses CUDA
or NVML; a container that never touched its vGPU has no series (HAMi #281). It is then left to DCGM.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from volcano_monitor.watchdog.sources.label_style import busiest_style

LEGACY, CURRENT, EXPORTED = "legacy", "current", "exported"


@dataclass(frozen=True, slots=True)
class HamiNames:
    util: str
    memory_used: str
    memory_limit: str
    labels: tuple[str, str, str]  # where namespace, pod and container are
    device: str  # the card's UUID label


_CURRENT = ("hami_container_device_utilization_ratio", "hami_vgpu_memory_used_bytes", "hami_vgpu_memory_limit_bytes")
STYLES: dict[str, HamiNames] = {
    LEGACY: HamiNames("Device_utilization_desc_of_container", "vGPU_device_memory_usage_in_bytes",
                      "vGPU_device_memory_limit_in_bytes", ("podnamespace", "podname", "ctrname"), "deviceuuid"),
    CURRENT: HamiNames(*_CURRENT, ("namespace", "pod", "container"), "device_uuid"),
    EXPORTED: HamiNames(*_CURRENT, ("exported_namespace", "exported_pod", "exported_container"), "device_uuid"),
}

DeviceKey = tuple[str, str, str, str]  # namespace, pod, container, card uuid


def _selector(style: str, namespace_matcher: str) -> str:
    names = STYLES[style]
    matchers = [f'{names.labels[1]}!=""']
    if style == CURRENT:
        matchers.append('exported_pod=""')  # the exported style's series have the monitor's own `pod` too
    if namespace_matcher:
        matchers.append(namespace_matcher)
    return "{" + ", ".join(matchers) + "}"


def util_query(style: str, namespace_matcher: str = "") -> str:
    """Per container and card: its SM utilisation in percent of the card. `max` per device: the same monitor
    scraped by two jobs must not count twice."""
    names = STYLES[style]
    by = ", ".join((*names.labels, names.device))
    return f"max by ({by}) ({names.util}{_selector(style, namespace_matcher)})"


def members_query(style: str, namespace_matcher: str = "") -> str:
    """Which container holds a vGPU on which card: the monitor's memory limit per container and card. Volcano's
    vgpu-monitor serves these (legacy names) but no utilisation: with them DCGM's card, which names no pod on a
    shared card, can still be split across the pods on it."""
    names = STYLES[style]
    by = ", ".join((*names.labels, names.device))
    return f"max by ({by}) ({names.memory_limit}{_selector(style, namespace_matcher)})"


def style_query() -> str:
    """How many memory-limit series each naming style has, as `{style="legacy"|"current"|"exported"}` (the
    memory series, which both HAMi's and Volcano's monitors serve; only HAMi's has the utilisation)."""
    legacy, current = STYLES[LEGACY].memory_limit, STYLES[CURRENT].memory_limit
    return (f'count by (style) (label_replace({legacy}{{podname!=""}}, "style", "{LEGACY}", "", "") '
            f'or label_replace({current}{{exported_pod!=""}}, "style", "{EXPORTED}", "", "") '
            f'or label_replace({current}{{exported_pod="", pod!=""}}, "style", "{CURRENT}", "", ""))')


def read_style(data: Any) -> str | None:
    """The style with more series in `style_query`'s answer; None when Prometheus has no HAMi series."""
    return busiest_style(data, STYLES)
