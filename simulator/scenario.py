"""Scenarios: the cluster (namespaces, nodes, queues) and the workloads the driver plays on it.

Durations here are scenario seconds; the driver divides them by its `speed`. Every workload says
what it is meant to trigger (`purpose`): the watchdog's detectors are tested against them. The types
they are written in (NodeSpec, QueueSpec, TaskSpec, Workload, Scenario) are in simulator.specs.
"""

from __future__ import annotations

from volcano_monitor.simulator.recorded_scenarios import (
    KWOK_NODES,
    RECORDED_CLASSES,
    RECORDED_PRIORITY_CLASSES,
    RECORDED_QUEUES,
    RECORDED_WORKLOADS,
)
from volcano_monitor.simulator.specs import BulkSpec, NodeSpec, QueueSpec, Scenario, TaskSpec, Workload, busybox, job
from volcano_monitor.simulator.usage import (
    BUSY,
    IDLE_GPU,
    LIGHT,
    OVER_REQUESTED,
    TRAINING,
    TRAINING_SMALL,
    WAITING,
    UsageProfile,
    needs_memory,
    oom_profile,
)
from volcano_monitor.simulator.vgpu_scenarios import VGPU_SCENARIOS

H100 = "NVIDIA-H100-80GB-HBM3"
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}

# ---- the cluster -----------------------------------------------------------------------------------

NAMESPACES = ("default", "team-a", "team-b", "ml-platform")

NODES = (
    *(NodeSpec(f"cpu-node-{i:02d}", 32, 128, zone="zone-a" if i % 2 else "zone-b") for i in range(1, 7)),
    *(NodeSpec(f"gpu-node-{i:02d}", 64, 512, gpus=8, instance_type="p4d.24xlarge", zone="zone-a")
      for i in range(1, 4)),
)

QUEUES = (
    QueueSpec("root", parent=None, reclaimable=False),
    QueueSpec("default", weight=1),
    QueueSpec("prod", weight=4, reclaimable=False, priority=10,
              guarantee={"cpu": "32", "memory": "128Gi"}, deserved={"cpu": "96", "memory": "384Gi"}),
    QueueSpec("research", weight=2, priority=5, capability={"cpu": "192", "memory": "1536Gi"},
              deserved={"cpu": "96", "memory": "768Gi", "nvidia.com/gpu": "16"}),
    QueueSpec("research-nlp", parent="research", weight=1,
              capability={"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "10"},
              deserved={"cpu": "48", "memory": "384Gi", "nvidia.com/gpu": "8"}),
)

HOUR = 3600.0

# PriorityClass values (the simulated cluster's PriorityClasses): Volcano orders and preempts by them.
PRIORITY_CLASSES = {"high-priority": 1000, "low-priority": 100}


def priority_value(name: str | None) -> int:
    """The value of the named PriorityClass (0 for none, as Volcano takes a PodGroup without a class).
    Names are unique across the scenarios' class sets, so one lookup serves every scenario."""
    return PRIORITY_CLASSES.get(name or "", RECORDED_PRIORITY_CLASSES.get(name or "", 0))


WORKLOADS = (
    Workload(
        "etl-daily", "team-a", "prod",
        purpose="succeeds: Pending -> Running -> Completing -> Completed (coordinator's TaskCompleted "
                "completes the job and the workers are terminated)",
        tasks=(
            TaskSpec("coordinator", 1, cpu="1", memory="2Gi", runtime=360, profile=LIGHT,
                     image="registry.example.com/data/etl-runner:2.8.0", command=("etl", "coordinate"),
                     policies=({"event": "TaskCompleted", "action": "CompleteJob"},)),
            TaskSpec("worker", 3, cpu="4", memory="8Gi", memory_limit="12Gi", runtime=None, profile=BUSY,
                     image="registry.example.com/data/etl-runner:2.8.0", command=("etl", "work")),
        ),
        plugins={"env": (), "svc": ()}, pause=600,
    ),
    Workload(
        "report-gen", "team-b", "default",
        purpose="JobRetrying/RetryExhausted/JobFailed: exits 1 after 90 s; PodFailed -> RestartJob, "
                "retryCount 1, 2, 3 through Restarting, then Failed",
        tasks=(TaskSpec("main", 1, cpu="2", memory="4Gi", runtime=90, exit="error", exit_code=1, profile=LIGHT,
                        image="registry.example.com/bi/report-gen:0.9.1", command=("python", "report.py")),),
        policies=({"event": "PodFailed", "action": "RestartJob"},), max_retry=3, start_after=10, pause=900,
    ),
    Workload(
        "embed-features", "ml-platform", "research",
        purpose="PodOOMKilled/JobFailed: working set climbs from 1.8Gi to its 8Gi limit in 300 s, "
                "container terminated OOMKilled (137), pod Failed, job Failed",
        tasks=(TaskSpec("embed", 1, cpu="4", memory="6Gi", memory_limit="8Gi", runtime=None, exit="oom",
                        exit_code=137, profile=oom_profile(300),
                        image="registry.example.com/ml/embedder:1.2.0", command=("python", "embed.py")),),
        start_after=20, pause=1800,
    ),
    Workload(
        "bert-finetune", "ml-platform", "research-nlp",
        purpose="JobIdle: 2 GPUs at 0-2 % utilisation and ~2 % of its 8-core CPU request for 6 h, then "
                "Completed",
        tasks=(TaskSpec("trainer", 1, cpu="8", memory="64Gi", gpus=2, runtime=6 * HOUR, profile=IDLE_GPU,
                        image="registry.example.com/ml/bert-train:4.1.0", command=("python", "finetune.py")),),
        pause=600,
    ),
    Workload(
        "llama-pretrain", "ml-platform", "research-nlp",
        purpose="healthy long training: 2 pods x 4 GPUs at ~85 % for 12 h, then Completed",
        tasks=(TaskSpec("worker", 2, cpu="16", memory="128Gi", gpus=4, runtime=12 * HOUR, profile=TRAINING,
                        image="registry.example.com/ml/llama-train:2.3.0", command=("torchrun", "pretrain.py")),),
        pause=1800, network_topology={"mode": "hard", "highestTierAllowed": 2},
        subgroup_policy=({"name": "worker", "subGroupSize": 2, "minSubGroups": 1,
                          "matchLabelKeys": ["volcano.sh/task-spec"]},),
    ),
    Workload(
        "llm-70b-sft", "ml-platform", "research",
        purpose="GangUnschedulable: 4 pods x 8 GPUs = 32 GPUs > 24 in the cluster; PodGroup Inqueue with "
                "Unschedulable/NotEnoughResources, pods Pending, job Pending forever",
        tasks=(TaskSpec("worker", 4, cpu="16", memory="128Gi", gpus=8, runtime=4 * HOUR, profile=TRAINING,
                        image="registry.example.com/ml/llm-sft:1.0.0", command=("torchrun", "sft.py")),),
        start_after=30, repeat=False,
    ),
    Workload(
        "ddp-resnet", "ml-platform", "research",
        purpose="PartialGang: 2 trainer pods Running holding 8 GPUs while the 2 evaluators (pinned to "
                "an H100 that no node has) stay Pending; minAvailable 4 never reached, PodGroup Unknown, "
                "job Pending",
        tasks=(
            TaskSpec("trainer", 2, cpu="8", memory="32Gi", gpus=4, runtime=None, profile=WAITING,
                     image="registry.example.com/ml/resnet-ddp:0.7.0", command=("torchrun", "train.py")),
            TaskSpec("evaluator", 2, cpu="4", memory="16Gi", gpus=1, runtime=None, profile=WAITING,
                     node_selector={"nvidia.com/gpu.product": H100},
                     image="registry.example.com/ml/resnet-ddp:0.7.0", command=("python", "evaluate.py")),
        ),
        gang=False, start_after=5, repeat=False,
    ),
    Workload(
        "batch-score", "team-a", "prod",
        purpose="OverRequested: requests 16 cores, uses ~1 (1/16) and 15 % of its memory for 20 min, "
                "then Completed",
        tasks=(TaskSpec("scorer", 1, cpu="16", memory="32Gi", runtime=1200, profile=OVER_REQUESTED,
                        image="registry.example.com/ml/batch-score:3.0.4", command=("python", "score.py")),),
        start_after=15, pause=600,
    ),
    Workload(
        "canary-infer", "team-b", "default",
        purpose="PodRejected/JobFailed: the kubelet rejects the bound pod (phase Failed, reason OutOfcpu)",
        tasks=(TaskSpec("server", 1, cpu="8", memory="16Gi", runtime=None, exit="rejected",
                        reject_reason="OutOfcpu", profile=LIGHT,
                        image="registry.example.com/serving/canary:5.2.1", command=("serve",)),),
        start_after=40, pause=1800,
    ),
    Workload(
        "mnist-ddp", "team-b", "default", kind="PyTorchJob",
        purpose="Kubeflow PyTorchJob: PodGroup owned by kubeflow.org/v1 PyTorchJob; its pods carry only "
                "the scheduling.k8s.io/group-name annotation; 3 x 1 GPU at ~60 % for 45 min, Completed; worker-0 "
                "crashes once at 10 min (exit 1) and is restarted in place (restartCount 1)",
        tasks=(
            TaskSpec("master", 1, cpu="4", memory="16Gi", gpus=1, runtime=2700, profile=TRAINING_SMALL,
                     container="pytorch", image="docker.io/kubeflowkatib/pytorch-mnist-gpu:v0.17.0",
                     command=("python3", "/opt/pytorch-mnist/mnist.py", "--epochs=20"), restart_policy="OnFailure"),
            TaskSpec("worker", 2, cpu="4", memory="16Gi", gpus=1, runtime=2700, profile=TRAINING_SMALL,
                     container="pytorch", crash_after=600, image="docker.io/kubeflowkatib/pytorch-mnist-gpu:v0.17.0",
                     command=("python3", "/opt/pytorch-mnist/mnist.py", "--epochs=20"), restart_policy="OnFailure"),
        ),
        start_after=25, pause=600,
    ),
    Workload(
        "hp-search", "ml-platform", "research-nlp",
        purpose="QueueStarved: 2 x 1 GPU trials wait (PodGroup Pending, not enqueued) while research-nlp "
                "sits at its 10-GPU capability; runs 30 min once GPUs free up",
        tasks=(TaskSpec("trial", 2, cpu="4", memory="16Gi", gpus=1, runtime=1800, profile=TRAINING_SMALL,
                        image="registry.example.com/ml/hp-search:0.4.0", command=("python", "trial.py")),),
        start_after=60, pause=600,
    ),
)

# Played only where the release serves CronJobs (v1.13+; simulator.extras creates the CronJob itself).
CRON_WORKLOADS = (
    Workload(
        "nightly-report", "team-a", "default",
        purpose="a Volcano CronJob's runs: Jobs named nightly-report-<minute>, owned by the CronJob, 4 min each; "
                "the watchdog files them under the workload nightly-report",
        tasks=(TaskSpec("main", 1, cpu="1", memory="2Gi", runtime=240, profile=LIGHT,
                        image="registry.example.com/bi/report-gen:0.9.1", command=("python", "nightly.py")),),
        start_after=5, pause=600, cron="nightly-report",
    ),
)

# `queue-wait`: jobs queueing for a capped queue, for the wait-time histograms. `batch` (2 cpu) is shared by
# `fifo` and `hold`; `hold`'s 2-cpu job fills it first, so the 30 `fifo` jobs (1 cpu, 10-20 s) are all
# Pending before any starts, then run two at a time: waits spread from ~30 s to ~4 min (scenario time).
WAIT_QUEUES = (QueueSpec("batch", capability={"cpu": "2", "memory": "64Gi"}), QueueSpec("hold", parent="batch"),
               QueueSpec("fifo", parent="batch"))
WAIT_WORKLOADS = (
    job("hold", "hold", (busybox("main", 1, cpu="2", runtime=40),), "fills `batch` while the fifo jobs queue"),
    *(job(f"fifo-{i:02d}", "fifo", (busybox("main", 1, runtime=10 + (i * 7) % 11),), "waits its turn in `fifo`",
           start_after=10, priority_class=("low-priority", "high-priority")[i % 2]) for i in range(30)),
)

# `eta-mixed`: recurring jobs of three priorities and sizes share a 4-cpu queue (`mixed`), for the expected-start
# estimate (bench/eta.py): 12 workloads arrive 20 s apart, run 1-5 min, and come back 2 min after they finish,
# so the queue stays saturated (waits of 10-20 min) and high-priority arrivals keep overtaking waiting jobs.
MIXED_QUEUES = (QueueSpec("mixed", capability={"cpu": "4", "memory": "64Gi"}),)
MIXED_WORKLOADS = tuple(
    Workload(f"mix-{i:02d}", "default", "mixed",
             (busybox("main", 1, cpu=str(1 + i % 3), runtime=60 + (i * 97) % 241),),
             "a recurring job of the mixed-priority queue", start_after=20 * i, pause=120,
             priority_class=(None, "low-priority", "high-priority")[(i // 2) % 3])
    for i in range(12))

# `preemption`: one 4-cpu node; a low-priority job holds it, a high-priority job of the same queue arrives
# and Volcano's preempt action evicts two of the low-priority pods (which are replaced, and wait).
PREEMPT_NODES = (NodeSpec("small-node-0", 4, 16, instance_type="kwok", system_reserved=False, gpu_taint=False),)
PREEMPT_WORKLOADS = (
    job("batch", "shared", (busybox("worker", 4, runtime=None),), "holds the node at low priority",
         priority_class="low-priority"),
    job("urgent", "shared", (busybox("worker", 2, runtime=20),), "preempts two batch pods",
         priority_class="high-priority", start_after=10),
)


# `oom-scale-up`: programs that need 2Gi but ask for 1Gi (limit 1Gi): the kernel kills them when their
# working set reaches the limit (after ~8 s); with a limit of 2Gi or more they run 40 s and succeed.
# `grows` opts in to the watchdog's OOM auto scale-up, `stays` opts out (volcano-monitor/oom-scale-up).
OOM_ANNOTATION = "volcano-monitor/oom-scale-up"


def _needs_2gi(name: str, opt_in: str) -> Workload:
    task = TaskSpec("main", 1, cpu="1", memory="1Gi", memory_limit="1Gi", image="busybox", container="main",
                    runtime=40, profile=needs_memory(2 * 2**30, 20))
    return job(name, "default", (task,), f"needs 2Gi, limited to 1Gi: OOMKilled; oom-scale-up {opt_in}",
                max_retry=1, annotations={OOM_ANNOTATION: opt_in})


OOM_WORKLOADS = (_needs_2gi("grows", "true"), _needs_2gi("stays", "false"))
# `gpu-idle`: one 8-GPU node and three GPU jobs that run until stopped: one whose GPU idles, one that
# trains, one on a GPU no DCGM exporter reports ("no GPU data", never "idle"). For GPU idle seconds and
# the AbortJob action (a bus Command consumed by the job controller, simulator.commands).
GPU_IDLE_NODES = (NodeSpec("gpu-node-0", 64, 512, gpus=8, instance_type="kwok", system_reserved=False,
                           gpu_taint=False),)
GPU_IDLE_WORKLOADS = tuple(
    Workload(name, "default", "gpu", (TaskSpec("trainer", 1, cpu="2", memory="4Gi", gpus=1, runtime=None,
                                               profile=profile, dcgm=dcgm),), purpose, repeat=False)
    for name, profile, dcgm, purpose in (
        ("idle-gpu", IDLE_GPU, True, "its GPU at 0-2 %: idle seconds grow"),
        ("busy-gpu", TRAINING, True, "its GPU at ~85 %: idle seconds stay 0"),
        ("no-dcgm", IDLE_GPU, False, "a GPU no DCGM exporter reports: no GPU data, never idle"),
    )
)
# `node-pressure`: the node detectors. gpu-node-01's 4 GPUs are held hostage by a CPU-only ETL job that takes
# 30 of its 32 cores (GpuStranded until the job completes); gpu-node-02 has nothing to run (no GpuStranded);
# on hot-node-01 two pods request 12 of 16 cores but use 1.25x their request, no CPU limit (NodeHot).
PRESSURE_NODES = (
    NodeSpec("gpu-node-01", 32, 128, gpus=4, instance_type="kwok", system_reserved=False, gpu_taint=False),
    NodeSpec("gpu-node-02", 32, 128, gpus=4, instance_type="kwok", system_reserved=False, gpu_taint=False),
    NodeSpec("hot-node-01", 16, 64, instance_type="kwok", system_reserved=False),
)
HOT = UsageProfile(cpu=1.25, cpu_wobble=0.02, memory=0.5)  # uses more CPU than it requests (no limit)


def _pinned(name: str, replicas: int, cpu: str, memory: str, node: str, runtime: float | None,
            profile: UsageProfile) -> TaskSpec:
    return TaskSpec(name, replicas, cpu=cpu, memory=memory, runtime=runtime, profile=profile,
                    node_selector={"kubernetes.io/hostname": node})


PRESSURE_WORKLOADS = (
    job("cpu-etl", "default", (_pinned("worker", 3, "10", "24Gi", "gpu-node-01", 200, LIGHT),),
         "GpuStranded: 3 CPU-only pods take 30 of gpu-node-01's 32 cores, its 4 GPUs are unusable for 200 s"),
    job("hot-serve", "default", (_pinned("server", 1, "6", "8Gi", "hot-node-01", None, HOT),),
         "NodeHot: requests 6 cores, uses 7.5", priority_class="high-priority"),
    job("hot-batch", "default", (_pinned("worker", 1, "6", "8Gi", "hot-node-01", None, HOT),),
         "NodeHot: requests 6 cores, uses 7.5", priority_class="low-priority"),
)


# `demo` (what `make demo` plays): the default scenario plus one untainted GPU node that a CPU-only job fills
# and runs hot, so GpuStranded and NodeHot fire too. Kept out of `default`, which most tests play: the extra
# node changes the cluster's size (root queue's deserved, HyperNode counts). Named after the GPU nodes, it
# is the last node first-fit tries: the default workloads' GPU pods all fit on gpu-node-01..03 before it.
HOSTAGE_NODE = NodeSpec("gpu-node-04", 16, 64, gpus=4, instance_type="g5.4xlarge", zone="zone-b", gpu_taint=False)
DEMO_WORKLOADS = (
    Workload("cpu-crunch", "team-a", "default",
             purpose="GpuStranded and NodeHot: a CPU-only job takes 14 of gpu-node-04's 15.5 cores (its 4 GPUs "
                     "unusable) and uses 1.05x its request, no limit (the node ~97 % busy); 2 h, then again",
             tasks=(_pinned("crunch", 1, "14", "16Gi", "gpu-node-04", 2 * HOUR,
                            UsageProfile(cpu=1.05, cpu_wobble=0.02, memory=0.5)),),
             priority_class="low-priority", pause=300),
    Workload("render-farm", "team-b", "default",
             purpose="GpuNoData: a 1-GPU job on a node without a DCGM exporter (no DCGM_FI_DEV_GPU_UTIL series: "
                     "never counted idle); busy CPU, 1 h, then again",
             tasks=(TaskSpec("render", 1, cpu="2", memory="8Gi", gpus=1, runtime=HOUR, profile=TRAINING,
                             dcgm=False, image="registry.example.com/vfx/render:2.3", command=("render",)),),
             pause=300),
)


def recorded_scenario(name: str) -> Scenario:
    queues, workloads = RECORDED_WORKLOADS[name]
    return Scenario(f"recorded-{name}", f"mirror of the recording of real Volcano: {name}", ("default",),
                    KWOK_NODES, RECORDED_QUEUES + queues, workloads,
                    priority_classes=RECORDED_CLASSES.get(name))


SCENARIOS: dict[str, Scenario] = {
    "default": Scenario(
        "default",
        "a small GPU/CPU cluster whose jobs succeed, fail and retry, OOM, idle, over-request, get "
        "rejected, and get stuck in gangs; finished jobs are resubmitted under a new name",
        NAMESPACES, NODES, QUEUES, WORKLOADS,
    ),
    "empty": Scenario("empty", "the default cluster's namespaces, nodes and queues, and no workload",
                      NAMESPACES, NODES, QUEUES),
    "scale": Scenario(
        "scale",
        "bulk objects for benchmarks: `pods` pods in `jobs` Running jobs across `queues` queues and "
        "`namespaces` namespaces on ceil(pods / pods_per_node) nodes, created at setup, no churn",
        bulk=BulkSpec(),
    ),
    "queue-wait": Scenario("queue-wait", "30 one-cpu jobs queueing behind each other in a 2-cpu queue",
                           ("default",), KWOK_NODES, RECORDED_QUEUES + WAIT_QUEUES, WAIT_WORKLOADS),
    "eta-mixed": Scenario("eta-mixed", "12 recurring jobs of three priorities and sizes saturating a 4-cpu queue",
                          ("default",), KWOK_NODES, RECORDED_QUEUES + MIXED_QUEUES, MIXED_WORKLOADS),
    "preemption": Scenario("preemption", "a high-priority job preempts a low-priority one in the same queue",
                           ("default",), PREEMPT_NODES, (*RECORDED_QUEUES, QueueSpec("shared")), PREEMPT_WORKLOADS),
    "oom-scale-up": Scenario("oom-scale-up", "two programs that need twice the memory they ask for; one opts "
                             "in to OOM auto scale-up, one out", ("default",), KWOK_NODES, RECORDED_QUEUES,
                             OOM_WORKLOADS),
    "gpu-idle": Scenario("gpu-idle", "an idle-GPU job, a busy one and one without DCGM data on one GPU node",
                         ("default",), GPU_IDLE_NODES, (*RECORDED_QUEUES, QueueSpec("gpu")), GPU_IDLE_WORKLOADS),
    "demo": Scenario("demo", "the default scenario plus a GPU node whose GPUs a CPU-only job holds hostage while "
                             "running it hot (what `make demo` plays)", NAMESPACES, (*NODES, HOSTAGE_NODE), QUEUES,
                     (*WORKLOADS, *DEMO_WORKLOADS)),
    "node-pressure": Scenario("node-pressure", "GPUs held hostage by CPU-only pods on one GPU node, another GPU "
                              "node idle, a CPU node running hot under overcommit", ("default",), PRESSURE_NODES,
                              RECORDED_QUEUES, PRESSURE_WORKLOADS),
    **{f"recorded-{name}": recorded_scenario(name) for name in RECORDED_WORKLOADS},
    **VGPU_SCENARIOS,  # vgpu-hami, vgpu-volcano (simulator.vgpu_scenarios)
}


def scenario_release(scenario: str, requested: str | None) -> str | None:
    """The Volcano release to serve for `scenario`: the one asked for, or, when none is, the oldest the
    scenario needs (None: the simulator's default store)."""
    spec = SCENARIOS.get(scenario)
    return requested if requested is not None or spec is None else spec.min_release
