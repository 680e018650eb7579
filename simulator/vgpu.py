"""The GPU-sharing device plugins as the simulated cluster plays them: HAMi (Project-HAMi/HAMi) and Volcano's vGPU
plugin (Project-HAMi/volcano-vgpu-device-plugin with Volcano's deviceshare scheduler plugin).

What a real cluster shows, and the simulator writes:

- **Node resources** (simulator.state.gpu_resources): HAMi registers `nvidia.com/gpu` = cards x split count
  (deviceSplitCount, 10); Volcano's plugin registers `volcano.sh/vgpu-number` = cards x split,
  `volcano.sh/vgpu-memory` = the cards' memory in MiB (memory factor 1) and `volcano.sh/vgpu-cores` = 100 per
  card. GPU feature discovery's labels still count physical cards (`nvidia.com/gpu.count`, `.product`,
  `.memory` in MiB).
- **Node annotations** (what the device plugin patches every 30 s): HAMi `hami.io/node-handshake`
  ("Reported <time>") and `hami.io/node-nvidia-register`, a JSON list of cards (HAMi v2.5+:
  `{"id","index","count","devmem","devcore","type","mode","health"}`, zero values omitted as Go's omitempty
  does) or, on a node of `register_format="text"`, the older text form `uuid,count,devmem,devcore,type,numa,
  health,index,mode:` per card; Volcano `volcano.sh/node-vgpu-handshake` and `volcano.sh/node-vgpu-register`,
  `uuid,count,devmem,type,health,mode:` per card (what Volcano's deviceshare decodes).
- **Pod annotations** once its vGPUs are placed and the plugin allocated them: HAMi `hami.io/vgpu-node`,
  `hami.io/vgpu-time`, `hami.io/vgpu-devices-allocated` (`uuid,NVIDIA,<MiB>,<cores>:` per vGPU, `;` after
  each container), `hami.io/vgpu-devices-to-allocate` (emptied to `;` by the device plugin),
  `hami.io/bind-phase: success`, `hami.io/bind-time`; Volcano `volcano.sh/vgpu-node`, `volcano.sh/vgpu-time`,
  `volcano.sh/vgpu-ids-new` (same device encoding, containers joined by `;`), `volcano.sh/devices-to-allocate`
  (emptied), `volcano.sh/bind-phase`, `volcano.sh/bind-time`.

Placement follows both plugins' fit rules, card by card: a vGPU goes to a card with a free slot, enough free
memory (a request without memory takes the whole card's), cores that stay <= 100, not a card others use when it
asks 100 % of the cores, not a full card when it asks none; each vGPU of one container on a different card.
Cards are tried binpack (most used memory first, then lowest index), so four quarter pods share one card; real
HAMi defaults to spreading vGPUs (four quarter pods would then sit on four cards, each a quarter used) and
Volcano's deviceshare tries cards from the last one down: that changes where the shares sit, not their size.
A plain `nvidia.com/gpu` on a HAMi node is HAMi's: vGPUs with the whole card's memory (`request_for`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import replace

from volcano_monitor.simulator.specs import TaskSpec, VgpuRequest
from volcano_monitor.simulator.state import CardUse, NodeSim, PodSim
from volcano_monitor.simulator.usage import VgpuSlice

HAMI_REGISTER, HAMI_HANDSHAKE = "hami.io/node-nvidia-register", "hami.io/node-handshake"
VOLCANO_REGISTER, VOLCANO_HANDSHAKE = "volcano.sh/node-vgpu-register", "volcano.sh/node-vgpu-handshake"
HAMI_ALLOCATED, HAMI_TO_ALLOCATE = "hami.io/vgpu-devices-allocated", "hami.io/vgpu-devices-to-allocate"
VOLCANO_ALLOCATED, VOLCANO_TO_ALLOCATE = "volcano.sh/vgpu-ids-new", "volcano.sh/devices-to-allocate"
NO_FIT = "not enough gpu fitted on this node"  # Volcano deviceshare's words

__all__ = ["NO_FIT", "allocate", "card_type", "fits", "node_annotations", "pod_annotations", "release", "request_for",
           "take"]


def card_type(node: NodeSim) -> str:
    """The card's type as both plugins register it: "NVIDIA-" and NVML's model name."""
    return "NVIDIA-" + (node.devices[0].model if node.devices else "")


def _go_time(t: float) -> str:
    """Go's time.Time.String() in UTC, as the plugins write their handshake."""
    whole = int(t)
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(whole)) + f".{int((t - whole) * 1e9):09d} +0000 UTC"


def node_annotations(node: NodeSim, now: float) -> dict[str, str]:
    """The register and handshake annotations of the node's device plugin ({} for NVIDIA's)."""
    spec, kind = node.spec, card_type(node)
    if not node.shared:
        return {}
    if spec.device_plugin == "hami":
        if spec.register_format == "text":
            register = "".join(f"{d.uuid},{spec.split},{spec.gpu_memory_mib},100,{kind},0,true,{d.index},hami-core:"
                               for d in node.devices)
        else:
            cards = []
            for d in node.devices:
                card: dict[str, object] = {"id": d.uuid}
                if d.index:
                    card["index"] = d.index  # Go's omitempty drops the zero index (and numa 0)
                card |= {"count": spec.split, "devmem": spec.gpu_memory_mib, "devcore": 100, "type": kind,
                         "mode": "hami-core", "health": True}
                cards.append(card)
            register = json.dumps(cards, separators=(",", ":"))
        return {HAMI_HANDSHAKE: f"Reported {_go_time(now)}", HAMI_REGISTER: register}
    register = "".join(f"{d.uuid},{spec.split},{spec.gpu_memory_mib},{kind},true,hami-core:" for d in node.devices)
    return {VOLCANO_HANDSHAKE: f"Reported {_go_time(now)}", VOLCANO_REGISTER: register}


def request_for(task: TaskSpec, node: NodeSim) -> VgpuRequest | None:
    """The vGPUs a task asks of this node: its own request, or, on a HAMi node, its whole `nvidia.com/gpu`
    cards as HAMi takes them (vGPUs with the whole card's memory); None when the node places no vGPU."""
    if task.vgpu is not None:
        return task.vgpu
    if task.gpus and node.spec.device_plugin == "hami":
        return VgpuRequest("hami", task.gpus)
    return None


def _wants(request: VgpuRequest, card_memory: int) -> tuple[int, int]:
    """(memory MiB, cores %) of one vGPU: no memory asked is the whole card (both plugins' 100 % default)."""
    return (request.memory_mib if request.memory_mib is not None else card_memory), (request.cores or 0)


def _card_fits(use: CardUse, split: int, card_memory: int, memory: int, cores: int) -> bool:
    if use.vgpus >= split or card_memory - use.memory_mib < memory or use.cores + cores > 100:
        return False
    if cores == 100 and use.vgpus > 0:  # 100 % of the cores asks for the card alone
        return False
    return not (use.cores >= 100 and cores == 0)


def fits(node: NodeSim, request: VgpuRequest, cards: Sequence[CardUse] | None = None) -> list[int] | None:
    """The cards (indices) the container's vGPUs go to on `node` (binpack), or None when they do not fit.
    `cards`: the card use to test against (a scheduler's scratch copy; default the node's own)."""
    plugin = "hami" if request.plugin == "hami" else "volcano-vgpu"
    if not node.shared or node.spec.device_plugin != plugin:
        return None
    use = list(cards if cards is not None else node.cards)
    memory, cores = _wants(request, node.spec.gpu_memory_mib)
    order = sorted(range(len(use)), key=lambda i: (-use[i].memory_mib, i))
    chosen = [i for i in order if _card_fits(use[i], node.spec.split, node.spec.gpu_memory_mib, memory, cores)]
    return sorted(chosen[:request.count]) if len(chosen) >= request.count else None


def take(cards: list[CardUse], indices: Sequence[int], request: VgpuRequest, card_memory: int,
         sign: int = 1) -> None:
    """Add (sign 1) or give back (-1) the vGPUs of `request` on the cards `indices`."""
    memory, cores = _wants(request, card_memory)
    for i in indices:
        use = cards[i]
        cards[i] = replace(use, vgpus=use.vgpus + sign, memory_mib=use.memory_mib + sign * memory,
                           cores=use.cores + sign * cores)


def allocate(node: NodeSim, request: VgpuRequest | None) -> tuple[VgpuSlice, ...]:
    """Place a pod's vGPUs on the node's cards (the scheduler checked they fit); () when it asks none."""
    if request is None or not node.shared:
        return ()
    indices = fits(node, request) or []
    take(node.cards, indices, request, node.spec.gpu_memory_mib)
    memory, cores = _wants(request, node.spec.gpu_memory_mib)
    return tuple(VgpuSlice(node.devices[i], memory, cores) for i in indices)


def release(node: NodeSim, pod: PodSim) -> None:
    """Give the pod's vGPUs back to their cards."""
    request = pod.vgpu_request
    if request is None or not pod.vgpu or not node.shared:
        return
    take(node.cards, [s.device.index for s in pod.vgpu], request, node.spec.gpu_memory_mib, -1)


def _encode(slices: Sequence[VgpuSlice]) -> str:
    return "".join(f"{s.device.uuid},NVIDIA,{s.memory_mib},{s.cores}:" for s in slices)


def pod_annotations(pod: PodSim) -> dict[str, str]:
    """The annotations the plugin's scheduler side and device plugin leave on a pod whose vGPUs are placed."""
    request = pod.vgpu_request
    if request is None or not pod.vgpu or pod.node is None:
        return {}
    bound = str(int(pod.bound_at or pod.created))
    devices = _encode(pod.vgpu)
    if request.plugin == "hami":
        return {"hami.io/vgpu-node": pod.node, "hami.io/vgpu-time": bound, HAMI_ALLOCATED: devices + ";",
                HAMI_TO_ALLOCATE: ";", "hami.io/bind-phase": "success", "hami.io/bind-time": bound}
    return {"volcano.sh/vgpu-node": pod.node, "volcano.sh/vgpu-time": bound, VOLCANO_ALLOCATED: devices,
            VOLCANO_TO_ALLOCATE: "", "volcano.sh/bind-phase": "success", "volcano.sh/bind-time": bound}
