"""`vgpu-hami` and `vgpu-volcano`: GPUs shared between pods, and a gang waiting on a fragmented HyperNode tree.

The same cluster twice, once with HAMi's device plugin (`nvidia.com/gpu` counting vGPUs, `nvidia.com/gpucores`,
`nvidia.com/gpumem`) and once with Volcano's vGPU plugin (`volcano.sh/vgpu-number`, `-cores`, `-memory`); what
each writes on nodes and pods is in simulator.vgpu, the metrics in simulator.vgpu_metrics. Both need Volcano
v1.12 or later (HyperNode, PodGroup `networkTopology`): an older `--volcano-release` is refused, and without
one v1.12 is served. Play them with `volcano-sim --scenario vgpu-hami` (or `vgpu-volcano`).

The cluster: 4 nodes, each 96 cores, 768Gi, 8 x NVIDIA A100-SXM4-80GB (81920 MiB; GPU feature discovery says
`nvidia.com/gpu.count: 8`), split 10 ways (HAMi: allocatable `nvidia.com/gpu: 80`; Volcano: `vgpu-number: 80`,
`vgpu-memory: 655360`, `vgpu-cores: 800`). gpu-22 of vgpu-hami registers its cards in HAMi's older text format,
the others in JSON. HyperNodes: tier 1 `rack-1` = {gpu-11, gpu-12}, `rack-2` = {gpu-21, gpu-22}; tier 2
`spine` = {rack-1, rack-2}.

The workloads (queue `gpu`, namespace `default`), each pinned to its node except the gang:

    job            pods x vGPU request                         node    cards             physical GPUs
    shared-infer   3 server + 1 cache, each 1 vGPU at 25 %      gpu-11  card 0 (shared)   1.0 (4 vGPUs)
                   cores and 20480 MiB (a quarter of the card)
    notebook-idle  1 x 1 whole card, uses 0-2 % of it           gpu-11  card 1            1
    train-whole    1 x 4 whole cards, ~85 %                     gpu-11  cards 2-5         4
    resnet-a       1 x 6 whole cards                            gpu-12  cards 0-5         6
    bert-sweep     1 x 5 whole cards, ends after 30 min         gpu-21  cards 0-4         5
    vit-train      1 x 4 whole cards                            gpu-22  cards 0-3         4
    allreduce-8    8 x 1 whole card, networkTopology hard,      waits (see below)         (8 once placed)
                   highestTierAllowed 1, from 60 s

A "whole card" is a vGPU request without memory or cores: both plugins then give it all the card's memory.
The idle card is card 1 of gpu-11: REQUESTED AND UNUSED (notebook-idle holds it at 0-2 %), so GpuIdle/JobIdle
are the rules that should see it, not GpuStranded; the free cards (requested by nobody) are the fragmented pool.
The cache pod keeps its vGPU memory at ~97 % of its 20480 MiB limit (above the 95 % alert line); the servers at
~60 %. Per-container card utilisation: servers ~20 % each, cache ~10 %, so DCGM sees card 0 of gpu-11 at ~70 %
and cannot say which pod used what.

Hand-computed values while bert-sweep runs (no pod's CPU or memory binds: the typical 4 cores and 16Gi per GPU
fit every free card):

    free physical GPUs   gpu-11: 2 (cards 6, 7)  gpu-12: 2  gpu-21: 3  gpu-22: 4   cluster: 11
    per HyperNode        rack-1: 4   rack-2: 7   spine: 11
    largest gang         tier 1: 7 GPUs (rack-2)   tier 2: 11 GPUs (spine)
    GPU-hours requested per hour: 21.0 physical (shared-infer 1.0 = four pods at 25 %, notebook-idle 1,
        train-whole 4, resnet-a 6, bert-sweep 5, vit-train 4); counting vGPUs as GPUs would say 24

allreduce-8 needs 8 GPUs inside one tier-1 HyperNode: the cluster has 11 free, no rack has 8, so it waits
(`topology_fragmented`; the simulator's scheduler never spreads it across racks). A HyperNode frees up when
bert-sweep ends (30 scenario minutes after it starts) or when a test deletes its Job: rack-2 then has 12 free,
the gang starts there (first fit: all 8 pods on gpu-21), and afterwards

    free physical GPUs   gpu-11: 2  gpu-12: 2  gpu-21: 0  gpu-22: 4   cluster: 8
    per HyperNode        rack-1: 4   rack-2: 4   spine: 8
    largest gang         tier 1: 4   tier 2: 8
    GPU-hours requested per hour: 24.0 physical (21 - 5 + 8)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from volcano_monitor.simulator.recorded_scenarios import RECORDED_QUEUES
from volcano_monitor.simulator.specs import (
    HyperNodeSpec,
    NodeSpec,
    QueueSpec,
    Scenario,
    TaskSpec,
    VgpuRequest,
    Workload,
)
from volcano_monitor.simulator.usage import TRAINING, UsageProfile

Plugin = Literal["hami", "volcano-vgpu"]
CARD_MIB = 81920
QUARTER_MIB = CARD_MIB // 4
MIN_RELEASE = "v1.12"
BLOCKER_RUNTIME = 1800.0  # bert-sweep: scenario seconds until rack-2 frees up
GANG_START = 60.0

SHARED_SERVER = UsageProfile(cpu=0.5, memory=0.5, gpu_util=20.0, gpu_wobble=2.0, gpu_memory=0.6)
SHARED_CACHE = UsageProfile(cpu=0.3, memory=0.5, gpu_util=10.0, gpu_wobble=1.0, gpu_memory=0.97)
IDLE_CARD = UsageProfile(cpu=0.02, cpu_wobble=0.2, memory=0.1, gpu_util=1.0, gpu_wobble=1.0, gpu_memory=0.05)

NODE_RACKS = {"gpu-11": "rack-1", "gpu-12": "rack-1", "gpu-21": "rack-2", "gpu-22": "rack-2"}
TREE = (
    HyperNodeSpec("rack-1", 1, "rack", nodes=("gpu-11", "gpu-12")),
    HyperNodeSpec("rack-2", 1, "rack", nodes=("gpu-21", "gpu-22")),
    HyperNodeSpec("spine", 2, "spine", hypernodes=("rack-1", "rack-2")),
)

# The hand-computed values of the docstring, for the tests and the other components' tests.
FREE_GPUS: Mapping[str, int] = {"gpu-11": 2, "gpu-12": 2, "gpu-21": 3, "gpu-22": 4}
HYPERNODE_FREE_GPUS: Mapping[str, int] = {"rack-1": 4, "rack-2": 7, "spine": 11}
LARGEST_GANG: Mapping[int, int] = {1: 7, 2: 11}
FREE_GPUS_AFTER: Mapping[str, int] = {"gpu-11": 2, "gpu-12": 2, "gpu-21": 0, "gpu-22": 4}
HYPERNODE_FREE_GPUS_AFTER: Mapping[str, int] = {"rack-1": 4, "rack-2": 4, "spine": 8}
LARGEST_GANG_AFTER: Mapping[int, int] = {1: 4, 2: 8}
PHYSICAL_GPUS: Mapping[str, float] = {"shared-infer": 1.0, "notebook-idle": 1.0, "train-whole": 4.0, "resnet-a": 6.0,
                                      "bert-sweep": 5.0, "vit-train": 4.0, "allreduce-8": 8.0}
VGPUS: Mapping[str, int] = {"shared-infer": 4, "notebook-idle": 1, "train-whole": 4, "resnet-a": 6, "bert-sweep": 5,
                            "vit-train": 4, "allreduce-8": 8}
GPU_HOURS_PER_HOUR = 21.0  # physical GPUs requested while the gang waits
GPU_HOURS_PER_HOUR_AFTER = 24.0
GANG = "allreduce-8"
BLOCKER = "bert-sweep"
IDLE_JOB, IDLE_NODE, IDLE_CARD_INDEX = "notebook-idle", "gpu-11", 1
SHARED_JOB, SHARED_NODE, SHARED_CARD_INDEX = "shared-infer", "gpu-11", 0
HOT_MEMORY_POD_TASK = "cache"  # its vGPU memory stays above 95 % of its limit


def _nodes(plugin: Plugin) -> tuple[NodeSpec, ...]:
    return tuple(NodeSpec(name, 96, 768, gpus=8, instance_type="p4d.24xlarge", zone=f"zone-{rack[-1]}",
                          system_reserved=False, gpu_taint=False, device_plugin=plugin,
                          register_format="text" if plugin == "hami" and name == "gpu-22" else "json")
                 for name, rack in NODE_RACKS.items())


def _task(name: str, replicas: int, plugin: Plugin, node: str | None, *, count: int = 1, cores: int | None = None,
          memory_mib: int | None = None, cpu: str = "4", memory: str = "32Gi", runtime: float | None = None,
          profile: UsageProfile = TRAINING) -> TaskSpec:
    return TaskSpec(name, replicas, cpu=cpu, memory=memory, runtime=runtime, profile=profile,
                    vgpu=VgpuRequest(plugin, count, cores, memory_mib),
                    node_selector={"kubernetes.io/hostname": node} if node else {},
                    image="registry.example.com/ml/vgpu-demo:1.0.0", command=("python", f"{name}.py"))


def _workloads(plugin: Plugin) -> tuple[Workload, ...]:
    def job(name: str, tasks: tuple[TaskSpec, ...], purpose: str, **kwargs: Any) -> Workload:
        return Workload(name, "default", "gpu", tasks, purpose, repeat=False, **kwargs)

    def quarter(name: str, replicas: int, profile: UsageProfile) -> TaskSpec:
        return _task(name, replicas, plugin, "gpu-11", cores=25, memory_mib=QUARTER_MIB, cpu="2", memory="8Gi",
                     profile=profile)

    return (
        job("shared-infer", (quarter("server", 3, SHARED_SERVER), quarter("cache", 1, SHARED_CACHE)),
            "four pods at 25 % of card 0 of gpu-11 (cores 25, a quarter of its memory): 1.0 physical GPU, 4 vGPUs; "
            "the cache pod's vGPU memory stays at ~97 % of its limit"),
        job("notebook-idle", (_task("notebook", 1, plugin, "gpu-11", cpu="2", memory="16Gi", profile=IDLE_CARD),),
            "the idle card: holds card 1 of gpu-11 whole and uses 0-2 % of it (requested and unused)", start_after=5),
        job("train-whole", (_task("trainer", 1, plugin, "gpu-11", count=4, cpu="16", memory="128Gi"),),
            "a whole-GPU job beside the shared card: 4 whole cards of gpu-11 at ~85 %", start_after=10),
        job("resnet-a", (_task("trainer", 1, plugin, "gpu-12", count=6, cpu="24"),),
            "fragments rack-1: 6 of gpu-12's 8 cards"),
        job(BLOCKER, (_task("trainer", 1, plugin, "gpu-21", count=5, cpu="20", runtime=BLOCKER_RUNTIME),),
            "fragments rack-2 for 30 min (5 of gpu-21's cards); when it ends rack-2 has room for the gang"),
        job("vit-train", (_task("trainer", 1, plugin, "gpu-22", count=4, cpu="16"),),
            "fragments rack-2: 4 of gpu-22's 8 cards"),
        job(GANG, (_task("worker", 8, plugin, None, runtime=4 * 3600.0),),
            "topology_fragmented: 8 x 1 GPU, hard topology inside one tier-1 HyperNode; 11 GPUs free in the cluster "
            "but at most 7 in one rack, so it waits until bert-sweep ends", start_after=GANG_START,
            network_topology={"mode": "hard", "highestTierAllowed": 1}),
    )


def vgpu_scenario(plugin: Plugin) -> Scenario:
    name = "vgpu-hami" if plugin == "hami" else "vgpu-volcano"
    which = "HAMi" if plugin == "hami" else "Volcano's vGPU plugin"
    return Scenario(
        name, f"GPUs shared through {which}: four pods at 25 % of one card, an idle card, whole-GPU jobs, and a "
              "hard-topology gang waiting on fragmented HyperNodes until one frees up (Volcano v1.12+)",
        ("default",), _nodes(plugin), (*RECORDED_QUEUES, QueueSpec("gpu")), _workloads(plugin),
        hypernodes=TREE, min_release=MIN_RELEASE, extra_kinds=False)


VGPU_SCENARIOS = {s.name: s for s in (vgpu_scenario("hami"), vgpu_scenario("volcano-vgpu"))}
