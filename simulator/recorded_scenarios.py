"""Mirrors of the recordings of real Volcano (../shared/volcano/recorded/v1.12.4): the same cluster, queues and
jobs as each recorded scenario, so tests/simulator/test_recorded_shapes.py (and test_queue_order.py) can play a
mirror and compare it with its recording. simulator.scenario names them `recorded-<scenario>`.
"""

from __future__ import annotations

from volcano_monitor.simulator.specs import NodeSpec, QueueSpec, TaskSpec, Workload, busybox, job
from volcano_monitor.simulator.usage import LIGHT

# The classes of the recording `queue-order` (its mirror's cluster serves them instead of
# simulator.scenario.PRIORITY_CLASSES).
RECORDED_PRIORITY_CLASSES = {"high": 1000, "low": 10}

# Same cluster (3 kwok nodes: 32 cpu, 256Gi, 8 GPUs, nothing reserved, no taints), same queues, same
# jobs; tests/simulator/test_recorded_shapes.py plays each and compares it with its recording.

KWOK_NODES = tuple(NodeSpec(f"kwok-node-{i}", 32, 256, gpus=8, instance_type="kwok", system_reserved=False,
                            gpu_taint=False) for i in range(3))
RECORDED_QUEUES = (QueueSpec("root", parent=None, reclaimable=False), QueueSpec("default"))


_EVICTED_RESTART = ({"event": "PodEvicted", "action": "RestartJob"},)


def _nginx_job(name: str, queue: str, cpu: str, runtime: float, min_available: int) -> Workload:
    """Volcano's examples/job.yaml: 6 nginx pods with the ssh/env/svc plugins."""
    return job(name, queue, (TaskSpec("default-nginx", 6, cpu=cpu, memory="", image="nginx", container="nginx",
                                      runtime=runtime, restart_policy="OnFailure", profile=LIGHT),),
               "examples/job.yaml", min_available=min_available, max_retry=5, policies=_EVICTED_RESTART,
               plugins={"env": (), "ssh": (), "svc": ()})


RECORDED_WORKLOADS: dict[str, tuple[tuple[QueueSpec, ...], tuple[Workload, ...]]] = {
    "job-completes": ((), (_nginx_job("test-job", "default", "1", 12, 3),)),
    "tf-ps-worker-completes": ((), (job(
        "tensorflow-dist-mnist", "default",
        (TaskSpec("ps", 1, cpu="", memory="", image="volcanosh/dist-mnist-tf-example:0.0.1", container="tensorflow",
                  runtime=None, profile=LIGHT),
         TaskSpec("worker", 2, cpu="", memory="", image="volcanosh/dist-mnist-tf-example:0.0.1",
                  container="tensorflow", runtime=5, profile=LIGHT,
                  policies=({"event": "TaskCompleted", "action": "CompleteJob"},))),
        "both workers succeed: CompleteJob, the ps pod is deleted while Running", min_available=3,
        policies=_EVICTED_RESTART, plugins={"env": (), "svc": ()}),)),
    "pod-oomkilled-job-fails": ((), (job(
        "oom", "default", (busybox("trainer", 1, memory_limit="1Gi", runtime=3, exit="oom", exit_code=137),),
        "OOMKilled after 3 s, RestartJob, maxRetry 2: two runs then Failed", max_retry=2,
        policies=({"event": "PodFailed", "action": "RestartJob"},)),)),
    "pod-error-abort": ((), (job(
        "crash", "default", (busybox("worker", 2, runtime=3, exit="error", exit_code=1),),
        "exit 1 after 3 s, AbortJob", policies=({"event": "PodFailed", "action": "AbortJob"},)),)),
    "gang-too-big": ((), (job("biggang", "default", (busybox("worker", 4, cpu="30"),),
                               "120 cpu > 96 in the cluster: never enqueued"),)),
    "gang-unschedulable": ((), (job("gang", "default", (busybox("worker", 4, cpu="20"),),
                                     "80 cpu <= 96 but one pod per node: admitted, never placed"),)),
    "queue-capability-wait": (
        (QueueSpec("small", reclaimable=False, capability={"cpu": "2", "memory": "4Gi"}),),
        (job("first", "small", (busybox("worker", 2, runtime=15),), "fills the queue"),
         job("second", "small", (busybox("worker", 1, runtime=3),), "waits for capability",
              start_after=2))),
    "pod-rejected-outofcpu": ((), (job(
        "rejected", "default", (busybox("worker", 1, exit="rejected"),),
        "the kubelet refuses the pod"),)),
    "job-deleted-while-running": ((), (job(
        "longrun", "default", (busybox("worker", 3),), "deleted while Running",
        delete_after=6),)),
    "hierarchical-queues": (
        tuple(QueueSpec(f"root-{q}") for q in ("eng-prod", "eng-dev", "sci-prod", "sci-dev")),
        tuple(_nginx_job(f"{q}-job", f"root-{q}", "500m", 10, 1)
              for q in ("eng-prod", "eng-dev", "sci-prod", "sci-dev"))),
    # Start order is not position order: `small` fits beside `holder` and starts while `big` (earlier, does
    # not fit) waits; when `holder` ends `urgent` (high) and `plain` (no class, 0) start together, `big` last.
    "queue-order": (
        (QueueSpec("narrow", reclaimable=False, capability={"cpu": "4", "memory": "16Gi"}),),
        (job("holder", "narrow", (busybox("worker", 1, cpu="3", runtime=14),), "holds 3 of the queue's 4 cpu"),
         job("big", "narrow", (busybox("worker", 1, cpu="4", runtime=5),), "does not fit: waits for an empty queue",
              start_after=2, priority_class="low"),
         job("small", "narrow", (busybox("worker", 1, cpu="1", runtime=5),), "fits: starts beside holder",
              start_after=3, priority_class="low"),
         job("urgent", "narrow", (busybox("worker", 1, cpu="2", runtime=5),), "first once holder ends",
              start_after=4, priority_class="high"),
         job("plain", "narrow", (busybox("worker", 1, cpu="2", runtime=5),), "fits beside urgent; overtakes big",
              start_after=5))),
}
# The PriorityClasses a mirror's cluster has, where they are not PRIORITY_CLASSES.
RECORDED_CLASSES: dict[str, dict[str, int]] = {"queue-order": RECORDED_PRIORITY_CLASSES}


