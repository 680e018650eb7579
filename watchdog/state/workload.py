"""Which workload a job run belongs to: runs of the same workload share usage history, so their
recommendations learn from each other. By default the workload is the job's name without a
generated run suffix (`etl-daily-7k2p` -> `etl-daily`, `train-20240501-1200` -> `train`); a
configured pod/job label, when present, wins. A Job a Volcano CronJob created (v1.13+: named
`<cron>-<scheduled minute>`, its controller owner the CronJob) belongs to the CronJob: the owner's
name is the workload, whatever the suffix stripping would make of it (`etl-2024-29000000` -> `etl-2024`,
not `etl`)."""

from __future__ import annotations

import re
from collections.abc import Mapping

# A trailing "-xxxxx" drawn from the alphabet Kubernetes uses for generated names (no vowels, so
# words like "-base" stay), or trailing numeric date/time/counter parts ("-20240501-1200", "-7").
_RUN_SUFFIX = re.compile(r"(-[bcdfghjklmnpqrstvwxz0-9]{4,5}|(-[0-9]+)+)$")
# OOM auto scale-up's resubmissions (`<name>-oom<N>`, watchdog.actions.oomscale) are runs of the same workload:
# the recommendation learns their peaks with the first run's.
_OOM_SUFFIX = re.compile(r"-oom[0-9]+$")


CRON_OWNER_KIND = "CronJob"  # batch.volcano.sh CronJob


def workload_name(job_name: str, labels: Mapping[str, str] | None = None, label: str | None = None,
                  owner_kind: str = "", owner_name: str = "") -> str:
    if label and labels and labels.get(label):
        return labels[label]
    if owner_kind == CRON_OWNER_KIND and owner_name:
        return owner_name
    stripped = _RUN_SUFFIX.sub("", _OOM_SUFFIX.sub("", job_name))
    return stripped or job_name
