"""Volcano Job (and task) families. Times come from the Job's conditions (DESIGN §3): a job that
never started has no start series, and durations exist only once both ends are known."""

from __future__ import annotations

from volcano_monitor.core.exposition import Family, resource_labels
from volcano_monitor.core.model import Job
from volcano_monitor.core.pending import REASONS, Explanation
from volcano_monitor.core.quantity import resource_label_and_unit

JOB = ("namespace", "job_name")

INFO = Family("volcano_job_info", "Information about a Volcano Job.",
              ("namespace", "job_name", "uid", "queue", "scheduler_name", "priority_class", "podgroup"))
CREATED = Family("volcano_job_created_timestamp_seconds", "Unix creation timestamp of the Job.", JOB)
STARTED = Family("volcano_job_start_time_seconds",
                 "Unix time the Job turned Running (its Running condition); absent until it starts.", JOB)
COMPLETED = Family("volcano_job_completion_time_seconds",
                   "Unix time the Job reached a terminal phase (Completed, Failed, Aborted, Terminated).",
                   (*JOB, "phase"))
WAITED = Family("volcano_job_wait_duration_seconds", "Seconds from creation until the Job started running.",
                (*JOB, "queue"))
RAN = Family("volcano_job_run_duration_seconds", "Seconds from start until the Job finished.", (*JOB, "queue"))
PHASE = Family("volcano_job_status_phase", "The Job's current phase (1 for the current one).",
               (*JOB, "queue", "phase"))
RETRIES = Family("volcano_job_status_retry_count", "How many times the Job has been retried.", JOB)
MAX_RETRY = Family("volcano_job_spec_max_retry", "Retries allowed before the Job is failed.", JOB)
MIN_AVAILABLE = Family("volcano_job_spec_min_available", "Pods that must run together for the Job to run.", JOB)
PODS = Family("volcano_job_status_pods", "The Job's pods by state, as its status counts them.", (*JOB, "state"))
REQUESTS = Family("volcano_job_resource_requests",
                  "Resources requested by all tasks x replicas of the Job; a Job holding GPUs also has "
                  "resource=\"physical_gpu\" (unit gpu), its physical cards (docs/gpu-sharing.md).",
                  resource_labels(*JOB, "queue"))
TASK_REPLICAS = Family("volcano_task_spec_replicas", "Replicas of a task of the Job.", (*JOB, "task"))
TASK_PODS = Family("volcano_task_status_pods", "Pods of a task by phase (status.taskStatusCount).",
                   (*JOB, "task", "phase"))

FAMILIES = (INFO, CREATED, STARTED, COMPLETED, WAITED, RAN, PHASE, RETRIES, MAX_RETRY, MIN_AVAILABLE, PODS,
            REQUESTS, TASK_REPLICAS, TASK_PODS)

# Not one of the Job's own rows: it changes with the queues too, so the store keeps it apart (see
# `ExporterStore.on_queue`), and it also explains PodGroups of other operators (Kubeflow, Spark).
PENDING_REASON = Family(
    "volcano_job_pending_reason",
    "Why a Job (or another operator's PodGroup, job_name = its owner) that is not running waits: 1 for its one "
    "reason, gone once it runs or is deleted. `queue` is the queue the reason is about (the job's own when none), "
    "`resource` the resource short of room or empty. Reasons, the first that holds: "
    + "; ".join(f"{reason}: {meaning}" for reason, meaning in REASONS.items()) + ".",
    (*JOB, "queue", "reason", "resource"))
QUEUE_POSITION = Family(
    "volcano_job_queue_position",
    "A waiting Job's (or another operator's PodGroup's) place in its queue, 1 = the scheduler takes it next; "
    "gone once it runs or is deleted. The order is Volcano v1.12's within one queue: the higher value of the "
    "PodGroup's PriorityClass first (no class, or an unknown one: the globalDefault class's value, else 0), then "
    "the older PodGroup, then namespace/podgroup name. A place, not a start order: a job that fits is admitted "
    "past an earlier one that does not. Jobs without a PodGroup yet have none.",
    (*JOB, "queue"))
PENDING = (PENDING_REASON, QUEUE_POSITION)


def render_pending(namespace: str, job_name: str, why: Explanation) -> str:
    resource = resource_label_and_unit(why.resource)[0] if why.resource else ""
    return PENDING_REASON.line((namespace, job_name, why.queue, why.reason, resource), 1)


def render_position(namespace: str, job_name: str, queue: str, position: int) -> str:
    return QUEUE_POSITION.line((namespace, job_name, queue), position)


def render(job: Job) -> tuple[str, ...]:
    ns, name, queue = job.namespace, job.name, job.queue
    key = (ns, name)
    created, started, finished = job.creation_timestamp, job.start_time, job.finish_time
    return (
        INFO.line((ns, name, job.uid, queue, job.scheduler_name, job.priority_class, job.podgroup), 1),
        CREATED.line(key, created) if created is not None else "",
        STARTED.line(key, started) if started is not None else "",
        COMPLETED.line((ns, name, job.finish_phase), finished) if finished is not None else "",
        WAITED.line((ns, name, queue), started - created) if started is not None and created is not None else "",
        RAN.line((ns, name, queue), finished - started) if finished is not None and started is not None else "",
        PHASE.line((ns, name, queue, job.phase), 1) if job.phase else "",
        RETRIES.line(key, job.retry_count),
        MAX_RETRY.line(key, job.max_retry),
        MIN_AVAILABLE.line(key, job.min_available),
        "".join(PODS.line((ns, name, state), count) for state, count in (
            ("pending", job.pending), ("running", job.running), ("succeeded", job.succeeded),
            ("failed", job.failed), ("terminating", job.terminating), ("unknown", job.unknown))),
        REQUESTS.resource_lines((ns, name, queue), job.requests),
        "".join(TASK_REPLICAS.line((ns, name, task.name), task.replicas) for task in job.tasks),
        "".join(TASK_PODS.line((ns, name, task, phase), count)
                for task, phases in job.task_status_counts for phase, count in phases),
    )
