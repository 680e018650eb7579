"""Which workload a job run belongs to: runs of the same workload share usage history, so their
recommendations learn from each other. By default the workload is the job's name without a
generated run suffix (`etl-daily-7k2p` -> `etl-daily`, `train-20240501-1200` -> `train`); a
configured pod/job label, when present, wins."""

from __future__ import annotations

import re
from collections.abc import Mapping

# A trailing "-xxxxx" drawn from the alphabet Kubernetes uses for generated names (no vowels, so
# words like "-base" stay), or trailing numeric date/time/counter parts ("-20240501-1200", "-7").
_RUN_SUFFIX = re.compile(r"(-[bcdfghjklmnpqrstvwxz0-9]{4,5}|(-[0-9]+)+)$")


def workload_name(job_name: str, labels: Mapping[str, str] | None = None, label: str | None = None) -> str:
    if label and labels and labels.get(label):
        return labels[label]
    stripped = _RUN_SUFFIX.sub("", job_name)
    return stripped or job_name
