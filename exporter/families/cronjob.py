"""Volcano CronJob families (`batch.volcano.sh` CronJob, v1.13+): the schedule, when it last fired
and succeeded, and how many of its Jobs run now. The Jobs themselves are ordinary Volcano Jobs
(`volcano_job_*`), owned by the CronJob."""

from __future__ import annotations

from volcano_monitor.core.exposition import Family
from volcano_monitor.core.kinds import CronJob

CRON = ("namespace", "cronjob")

INFO = Family("volcano_cronjob_info", "Information about a Volcano CronJob (schedule, time zone, concurrency policy).",
              (*CRON, "schedule", "timezone", "concurrency_policy"))
SUSPENDED = Family("volcano_cronjob_spec_suspend", "1 while the CronJob is suspended (spec.suspend).", CRON)
LAST_SCHEDULE = Family("volcano_cronjob_status_last_schedule_time_seconds",
                       "Unix time the CronJob last created a Job (status.lastScheduleTime).", CRON)
LAST_SUCCESS = Family("volcano_cronjob_status_last_successful_time_seconds",
                      "Unix time a Job of the CronJob last completed (status.lastSuccessfulTime).", CRON)
ACTIVE = Family("volcano_cronjob_status_active", "Jobs of the CronJob running now (status.active).", CRON)

FAMILIES = (INFO, SUSPENDED, LAST_SCHEDULE, LAST_SUCCESS, ACTIVE)


def render(cron: CronJob) -> tuple[str, ...]:
    key = (cron.namespace, cron.name)
    return (
        INFO.line((*key, cron.schedule, cron.time_zone, cron.concurrency_policy), 1),
        SUSPENDED.line(key, int(cron.suspend)),
        LAST_SCHEDULE.line(key, cron.last_schedule_time) if cron.last_schedule_time is not None else "",
        LAST_SUCCESS.line(key, cron.last_successful_time) if cron.last_successful_time is not None else "",
        ACTIVE.line(key, len(cron.active)),
    )
