"""The metrics of GPUs shared through a device plugin, beside the cAdvisor and DCGM series of simulator.usage
(all on the simulator's one /metrics, as if Prometheus scraped each exporter there).

- **HAMi's vGPUmonitor** (Project-HAMi/HAMi cmd/vGPUmonitor/metrics.go), on HAMi nodes, as it serves them with
  `--legacy-metrics`: the current names, `hami_vgpu_memory_used_bytes`, `hami_vgpu_memory_limit_bytes`,
  `hami_container_device_utilization_ratio` {namespace, pod, container, vdevice_index, device_uuid} and
  `hami_host_gpu_utilization_ratio`, `hami_host_gpu_memory_used_bytes` {node, device_index, device_uuid,
  device_type}; and the legacy ones older HAMi serves alone, `vGPU_device_memory_usage_in_bytes`,
  `vGPU_device_memory_limit_in_bytes`, `Device_utilization_desc_of_container` {podnamespace, podname, ctrname,
  vdeviceid, deviceuuid} and `HostCoreUtilization`, `HostGPUMemoryUsage` {nodeid, deviceidx, deviceuuid,
  devicetype}. Every series carries `zone="vGPU"` (the monitor's wrapping registerer).
- **Volcano's vgpu-monitor** (Project-HAMi/volcano-vgpu-device-plugin cmd/vgpu-monitor), on Volcano vGPU nodes:
  `vGPU_device_memory_usage_in_bytes`, `vGPU_device_memory_limit_in_bytes` {podnamespace, podname, ctrname,
  vdeviceid, deviceuuid, zone} and `HostCoreUtilization`, `HostGPUMemoryUsage` {deviceidx, deviceuuid, zone}.
  It has no per-container utilisation: only DCGM's per card, split by whoever reads it.
- **DCGM per physical card** on both: `DCGM_FI_DEV_GPU_UTIL` {gpu, UUID, device, modelName, Hostname} for every
  card of the node, with no pod labels: the exporter cannot map a card several pods share to one of them.

Values: a vGPU's memory in use and the share of the card its container uses come from its usage profile
(simulator.usage: `gpu_memory` of its limit, `gpu_util` percent of the card, capped at its core share); a
card's utilisation is the sum over the vGPUs on it (at most 100), its memory in use the sum of theirs.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from volcano_monitor.simulator.state import NodeSim
from volcano_monitor.simulator.usage import ContainerUsage, escape_label_value

ZONE = "vGPU"

HELP = {
    "hami_vgpu_memory_used_bytes": ("gauge", "vGPU device memory usage in bytes"),
    "hami_vgpu_memory_limit_bytes": ("gauge", "vGPU device memory limit in bytes"),
    "hami_container_device_utilization_ratio": ("gauge", "Container device SM utilization ratio"),
    "hami_host_gpu_utilization_ratio": ("gauge", "GPU core utilization ratio (0-100)"),
    "hami_host_gpu_memory_used_bytes": ("gauge", "GPU device memory usage in bytes"),
    "vGPU_device_memory_usage_in_bytes": ("gauge", "vGPU device usage"),
    "vGPU_device_memory_limit_in_bytes": ("gauge", "vGPU device limit"),
    "Device_utilization_desc_of_container": ("gauge", "Container device utilization description"),
    "HostCoreUtilization": ("gauge", "GPU core utilization"),
    "HostGPUMemoryUsage": ("gauge", "GPU device memory usage"),
}


def _labels(pairs: Iterable[tuple[str, str]]) -> str:
    return ",".join(f'{k}="{escape_label_value(v)}"' for k, v in pairs)


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(round(float(value), 3))


def card_usage(containers: Iterable[ContainerUsage], t: float) -> dict[str, tuple[float, float]]:
    """Per card UUID: (utilisation percent, memory bytes in use) of the vGPUs on it."""
    out: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for c in containers:
        for s in c.vgpu:
            entry = out[s.device.uuid]
            entry[0] += c.vgpu_util(t, s)
            entry[1] += c.vgpu_memory_bytes(t, s)
    return {uuid: (min(100.0, util), memory) for uuid, (util, memory) in out.items()}


def dcgm_card_lines(nodes: Iterable[NodeSim], cards: dict[str, tuple[float, float]]) -> list[str]:
    """DCGM_FI_DEV_GPU_UTIL for every card of the sharing plugins' nodes, without pod labels."""
    lines = []
    for node in sorted(nodes, key=lambda n: n.name):
        if not node.shared:
            continue
        for dev in node.devices:
            labels = _labels((("gpu", str(dev.index)), ("UUID", dev.uuid), ("device", f"nvidia{dev.index}"),
                              ("modelName", dev.model), ("Hostname", node.name)))
            lines.append(f"DCGM_FI_DEV_GPU_UTIL{{{labels}}} {_num(round(cards.get(dev.uuid, (0.0, 0.0))[0], 1))}")
    return lines


def render_vgpu(containers: Iterable[ContainerUsage], nodes: Iterable[NodeSim], t: float) -> str:
    """The vGPU monitors' families (text format 0.0.4, HELP and TYPE first); "" without a sharing plugin."""
    items = sorted(containers, key=lambda c: (c.namespace, c.pod, c.container))
    node_list = sorted((n for n in nodes if n.shared), key=lambda n: n.name)
    if not node_list:
        return ""
    plugin = {n.name: n.spec.device_plugin for n in node_list}
    cards = card_usage(items, t)
    lines: dict[str, list[str]] = defaultdict(list)
    for c in items:
        hami = plugin.get(c.node) == "hami"
        for vindex, s in enumerate(c.vgpu):
            used, limit, util = c.vgpu_memory_bytes(t, s), s.memory_mib * 2.0**20, round(c.vgpu_util(t, s), 1)
            legacy = _labels((("podnamespace", c.namespace), ("podname", c.pod), ("ctrname", c.container),
                              ("vdeviceid", str(vindex)), ("deviceuuid", s.device.uuid), ("zone", ZONE)))
            lines["vGPU_device_memory_usage_in_bytes"].append(f"{{{legacy}}} {_num(round(used))}")
            lines["vGPU_device_memory_limit_in_bytes"].append(f"{{{legacy}}} {_num(limit)}")
            if not hami:
                continue
            current = _labels((("namespace", c.namespace), ("pod", c.pod), ("container", c.container),
                               ("vdevice_index", str(vindex)), ("device_uuid", s.device.uuid), ("zone", ZONE)))
            lines["Device_utilization_desc_of_container"].append(f"{{{legacy}}} {_num(util)}")
            lines["hami_vgpu_memory_used_bytes"].append(f"{{{current}}} {_num(round(used))}")
            lines["hami_vgpu_memory_limit_bytes"].append(f"{{{current}}} {_num(limit)}")
            lines["hami_container_device_utilization_ratio"].append(f"{{{current}}} {_num(util)}")
    for node in node_list:
        kind = "NVIDIA-" + (node.devices[0].model if node.devices else "")
        for dev in node.devices:
            util, memory = cards.get(dev.uuid, (0.0, 0.0))
            util, memory = round(util, 1), round(memory)
            if plugin[node.name] == "hami":
                host = _labels((("nodeid", node.name), ("deviceidx", str(dev.index)), ("deviceuuid", dev.uuid),
                                ("devicetype", kind), ("zone", ZONE)))
                current = _labels((("node", node.name), ("device_index", str(dev.index)), ("device_uuid", dev.uuid),
                                   ("device_type", kind), ("zone", ZONE)))
                lines["hami_host_gpu_utilization_ratio"].append(f"{{{current}}} {_num(util)}")
                lines["hami_host_gpu_memory_used_bytes"].append(f"{{{current}}} {_num(memory)}")
            else:
                host = _labels((("deviceidx", str(dev.index)), ("deviceuuid", dev.uuid), ("zone", ZONE)))
            lines["HostCoreUtilization"].append(f"{{{host}}} {_num(util)}")
            lines["HostGPUMemoryUsage"].append(f"{{{host}}} {_num(memory)}")
    out: list[str] = []
    for name, (kind, help_text) in HELP.items():
        if lines.get(name):
            out += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
            out += [name + line for line in lines[name]]
    return "\n".join(out) + "\n" if out else ""
