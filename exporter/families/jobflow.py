"""JobFlow families (`flow.volcano.sh` JobFlow, every release from v1.9): a DAG of Volcano Jobs;
its phase, how many of its Jobs are in each state, and each Job's state and restarts."""

from __future__ import annotations

from volcano_monitor.core.exposition import Family
from volcano_monitor.core.kinds import JobFlow

FLOW = ("namespace", "jobflow")

PHASE = Family("volcano_jobflow_status_phase",
               "The JobFlow's current phase (1 for the current one): Pending, Running, Succeed, Terminating, Failed.",
               (*FLOW, "phase"))
STEPS = Family("volcano_jobflow_spec_flows", "Steps (Jobs) in the JobFlow's spec.flows.", FLOW)
JOBS = Family("volcano_jobflow_status_jobs",
              "The JobFlow's Jobs by state (pending/running/completed/failed/terminated/unknown), from its "
              "status lists.",
              (*FLOW, "state"))
JOB_STATE = Family("volcano_jobflow_job_state", "A Job of the JobFlow and its state (status.jobStatusList; 1).",
                   (*FLOW, "job_name", "state"))
JOB_RESTARTS = Family("volcano_jobflow_job_restarts", "Restarts of a Job of the JobFlow (status.jobStatusList).",
                      (*FLOW, "job_name"))

FAMILIES = (STEPS, PHASE, JOBS, JOB_STATE, JOB_RESTARTS)


def render(flow: JobFlow) -> tuple[str, ...]:
    ns, name = flow.namespace, flow.name
    return (
        STEPS.line((ns, name), flow.flows),
        PHASE.line((ns, name, flow.phase), 1) if flow.phase else "",
        "".join(JOBS.line((ns, name, state), count) for state, count in flow.jobs),
        "".join(JOB_STATE.line((ns, name, job.name, job.state), 1) for job in flow.job_status),
        "".join(JOB_RESTARTS.line((ns, name, job.name), job.restarts) for job in flow.job_status),
    )
