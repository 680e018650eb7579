"""GPU usage per container in PHYSICAL GPUs, on whole and on shared cards, from HAMi's and DCGM's per-card series.

What a container's GPU usage is reported as (`GpuUse`, then `UsageSample.gpu_util_percent` and `.gpus`):
`util_percent` of `gpus` physical GPUs, so `util_percent / 100 * gpus` is the physical GPUs it kept busy, the
quantity the ledger's GPU-seconds used add up (rollups: `gpu / 100 * gpus * dt`). On a shared card `gpus` is
the container's physical share (0.25 for a quarter of a card, from `core.gpushare.physical_gpus` of its pod's
requests, given here by `shares`) and `util_percent` the part of that share it used: 100 is "all it was
given", so thresholds (GpuIdle's idle percentage, waste) mean the same on a whole card and on a quarter.
A container that used more than its share (HAMi's core limit not enforced, or a DCGM split over fewer sharers
than the card holds) reports `util_percent` 100 of `gpus` = what it used, so the GPU-seconds stay what it used.

HAMi (`from_hami`): per container and vGPU, HAMi's utilisation is a percentage of the physical card (see
watchdog.sources.hami), so the container used `sum(util) / 100` physical GPUs whatever its share; its share
(pod's physical GPUs, split over the pod's containers with HAMi series in proportion to their vGPU count)
turns that into `util_percent`. Unknown share (pod not in the caches): the mean percentage of the cards over
their count, the same GPU-seconds.

DCGM (`from_dcgm`): DCGM reports per physical card and cannot tell which pod on a shared card used it
(NVML's device utilisation; dcgm-exporter's `--kubernetes-virtual-gpus` copies the card's value to every
sharer). A card is shared when DCGM's pod mapping names several pods on it, or one pod whose share of it is
under one card. The card's busy fraction is then split across the pods DCGM names on it, in proportion to
their physical shares: with four pods at 0.25 on a card at 80 %, each used 0.2 GPUs (80 % of its share),
whichever of them did the work. So with DCGM only, a pod on a shared card is idle exactly when its card is.
Who is on a card: the pods DCGM's pod mapping names on it, and the containers the vGPU monitor (HAMi's, or
Volcano's vgpu-monitor) reports a vGPU memory limit for on that card (its `deviceuuid`): on HAMi and Volcano
vGPU nodes DCGM usually names no pod, the monitor does. Pods neither names are not known to share the card:
the named ones get their usage too.
Whole cards (one pod, share >= 1 per card, or no share known) keep the plain reading: the mean utilisation of
the container's cards over their count.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from volcano_monitor.watchdog.state.samples import PodLookup

Key = tuple[str, str, str]  # namespace, pod, container
DeviceKey = tuple[str, ...]  # namespace, pod, container, card uuid ("" when the series names no card)
ShareLookup = Callable[[str, str], "float | None"]  # a pod's physical GPUs; None when unknown
EPSILON = 1e-9


def shares_of(pods: PodLookup) -> ShareLookup:
    """Each pod's physical GPUs as the informer caches say (`PodInfo.gpus`, core.gpushare); None when unknown."""
    def share(namespace: str, pod: str) -> float | None:
        info = pods(namespace, pod)
        return info.gpus if info is not None else None
    return share


@dataclass(frozen=True, slots=True)
class GpuUse:
    util_percent: float  # 0..100, of `gpus`
    gpus: float  # physical GPUs the percentage is of
    shared: bool = False  # read by a shared-card rule (HAMi, or DCGM split over its sharers)

    @property
    def used(self) -> float:
        """Physical GPUs kept busy."""
        return self.util_percent / 100.0 * self.gpus


def of_share(used: float, share: float) -> GpuUse:
    """`used` physical GPUs as a percentage of `share`, or 100 % of `used` when it is more than the share."""
    used = max(used, 0.0)
    if used > share:
        return GpuUse(100.0, used, True)
    return GpuUse(100.0 * used / share, share, True)


def _share(shares: ShareLookup | None, namespace: str, pod: str) -> float | None:
    found = shares(namespace, pod) if shares is not None else None
    return found if found is not None and found > EPSILON else None


def _plain(percents: list[float]) -> GpuUse:
    return GpuUse(sum(percents) / len(percents), float(len(percents)))


def from_hami(devices: Mapping[DeviceKey, float], shares: ShareLookup | None) -> dict[Key, GpuUse]:
    """Per container, from HAMi's utilisation per (container, card) in percent of the card (capped at 100)."""
    per_container: dict[Key, list[float]] = defaultdict(list)
    for (namespace, pod, container, *_), value in devices.items():
        per_container[(namespace, pod, container)].append(min(value, 100.0))
    vgpus_of_pod: dict[tuple[str, str], int] = defaultdict(int)
    for key, values in per_container.items():
        vgpus_of_pod[key[:2]] += len(values)
    uses: dict[Key, GpuUse] = {}
    for key, values in per_container.items():
        share = _share(shares, key[0], key[1])
        if share is None:
            uses[key] = GpuUse(sum(values) / len(values), float(len(values)), True)
        else:
            uses[key] = of_share(sum(values) / 100.0, share * len(values) / vgpus_of_pod[key[:2]])
    return uses


def from_dcgm(cards: Mapping[DeviceKey, float], shares: ShareLookup | None) -> dict[Key, GpuUse]:
    """Per container, from DCGM's utilisation per (container, card) in percent of the card, split over the
    card's pods when the card is shared. With `shares`, a pod they do not know (not a Volcano pod: e.g. the DCGM
    exporter's own pod, whose target labels an unmapped card carries when scraped with honorLabels) is left
    out: it would take a part of the card no job holds. A known pod without a physical share (a GPU resource
    core.gpushare does not count, e.g. a MIG slice) reads its cards as whole, as before shares existed."""
    pairs: dict[Key, dict[str, float]] = defaultdict(dict)  # container -> card -> utilisation
    for (namespace, pod, container, *rest), value in cards.items():
        if shares is not None and shares(namespace, pod) is None:
            continue
        uuid = rest[0] if rest and rest[0] else f"\x00{namespace}/{pod}/{container}"  # no card named: its own
        pairs[(namespace, pod, container)][uuid] = min(value, 100.0)
    pairs_of_pod: dict[tuple[str, str], int] = defaultdict(int)
    for key, on in pairs.items():
        pairs_of_pod[key[:2]] += len(on)
    portion: dict[tuple[Key, str], float] = {}  # the container's physical share of the card
    weight: dict[str, float] = defaultdict(float)  # the card's sum of shares
    pods_on: dict[str, set[tuple[str, str]]] = defaultdict(set)
    fractional: set[str] = set()  # cards a pod holds less than one of
    for key, on in pairs.items():
        share = _share(shares, key[0], key[1])
        for uuid in on:
            part = share / pairs_of_pod[key[:2]] if share is not None else 1.0
            portion[(key, uuid)] = part
            weight[uuid] += part
            pods_on[uuid].add(key[:2])
            if part < 1.0 - EPSILON:
                fractional.add(uuid)
    shared = fractional | {uuid for uuid, pods in pods_on.items() if len(pods) > 1}
    uses: dict[Key, GpuUse] = {}
    for key, on in pairs.items():
        if not shared.intersection(on):
            uses[key] = _plain(list(on.values()))
            continue
        used = allotted = 0.0
        for uuid, util in on.items():
            part = portion[(key, uuid)] if uuid in shared else 1.0
            used += util / 100.0 * (part / weight[uuid] if uuid in shared else 1.0)
            allotted += part
        uses[key] = of_share(used, allotted)
    return uses
