"""Wait-time and run-time histograms per queue x priority class (Kueue's `admission_wait_time_seconds`
is the model): how long Jobs waited before they ran, and how long finished Jobs ran.

Why histograms and not only the per-job gauges (`volcano_job_wait_duration_seconds`): a Job's gauge goes
with the Job (TTL, deletion), so a week of waits cannot be asked for once the Jobs are gone; buckets that
only grow can, with `histogram_quantile(0.9, sum by (le, queue) (rate(..._bucket[5m])))`.

Observing once, also across exporter restarts: a histogram is a counter, and a restarted exporter starts
from zero, so it must not observe again what the previous process already counted. Hence a run is observed
only when its transition is *newer than this process* (`observe_since`): the wait when the run turned
Running after the exporter started, the run time when the Job finished after it started. Jobs already
running at startup are therefore not in the wait histogram (their run time is, once they finish). Within one
process each Job UID remembers the run it observed last (`Ledger`), so resyncs, relists and the many
MODIFIED events of a Job (Volcano appends a condition on every status write) observe nothing again; the
record goes with the Job's DELETED event, so it is bounded by the Jobs that exist.

Restarts of a Volcano Job (`Restarting` -> `Pending` -> `Running`): each run is observed once. The restarted
run's wait is measured from its `Restarting` condition (when it went back to waiting, like Kueue's requeue),
not from the Job's creation; its run time when it finishes. Runs are told apart by their start time (see
`core.jobview._job_times`: the first `Running` of the latest run).

Rendering fits the store: each (queue, priority class) series block is rendered once per observation and
kept as bytes; a scrape concatenates them. Series are created at zero as soon as a Job of that queue and
priority class is seen, so `rate()` counts the first observation too (a series that appears already at 1
loses it). With sharding each replica observes the Jobs it owns: sum across replicas.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass, field

from volcano_monitor.core.exposition import HISTOGRAM, Family, escape, format_value
from volcano_monitor.core.model import Job

LABELS = ("queue", "priority_class")

# 1 s to 1 week in "round" values, at most 1.33x apart up to 10 minutes and 1.5x beyond.
# histogram_quantile interpolates linearly inside a bucket, so an answer is off by a fraction of the bucket's
# width: a few % for waits spread over several buckets (tests/exporter/test_prometheus_wait.py measures it).
BUCKETS: tuple[float, ...] = (
    1, 2, 3, 4, 5, 6, 8, 10, 12, 15, 20, 25, 30, 40, 50, 60, 75, 90, 120, 150, 180, 240, 300, 360, 480, 600,
    900, 1200, 1800, 2400, 3600, 5400, 7200, 10800, 14400, 21600, 28800, 43200, 64800, 86400, 129600, 172800,
    259200, 345600, 432000, 604800,
)

WAIT = Family("volcano_queue_job_wait_duration_seconds",
              "Seconds Volcano Jobs waited from creation (a restarted run: from its Restarting condition) until "
              "they turned Running, by queue and priority class. Observed once per run, only for runs that "
              "turned Running after this exporter process started (restarts never count a Job twice).",
              LABELS, type=HISTOGRAM)
RUN = Family("volcano_queue_job_run_duration_seconds",
             "Seconds finished Volcano Jobs ran (terminal condition minus the start of their last run), by queue "
             "and priority class. Observed once per run, only for Jobs that finished after this exporter "
             "process started.",
             LABELS, type=HISTOGRAM)
FAMILIES = (WAIT, RUN)

Series = tuple[str, str]  # queue, priority class


@dataclass
class Histogram:
    """One histogram series: per-bucket counts (not cumulative), sum and count, and its rendered text."""

    family: Family
    labels: Series
    counts: list[int] = field(default_factory=lambda: [0] * (len(BUCKETS) + 1))
    total: float = 0.0
    text: bytes = b""

    def __post_init__(self) -> None:
        self.text = self.render()

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(BUCKETS, value)] += 1  # `le` buckets: value <= bound
        self.total += value
        self.text = self.render()

    def render(self) -> bytes:
        queue, priority = (escape(v) for v in self.labels)
        prefix = f'{self.family.name}_bucket{{queue="{queue}",priority_class="{priority}",le="'
        lines, running = [], 0
        for bound, count in zip(BUCKETS, self.counts, strict=False):
            running += count
            lines.append(f'{prefix}{format_value(float(bound))}"}} {running}\n')
        running += self.counts[-1]
        lines.append(f'{prefix}+Inf"}} {running}\n')
        labels = f'{{queue="{queue}",priority_class="{priority}"}}'
        lines.append(f"{self.family.name}_sum{labels} {format_value(self.total)}\n")
        lines.append(f"{self.family.name}_count{labels} {running}\n")
        return "".join(lines).encode()


@dataclass
class Seen:
    """What one Job UID has had observed: the start of the run whose wait counted, the finish that counted."""

    started: float | None = None
    finished: float | None = None


class Ledger:
    """The two histograms and the per-Job record of what they hold. Not locked: the store's lock guards it."""

    def __init__(self, observe_since: float) -> None:
        self.observe_since = observe_since
        self.waits: dict[Series, Histogram] = {}
        self.runs: dict[Series, Histogram] = {}
        self.seen: dict[str, Seen] = {}  # by Job UID; one entry per existing Job at most
        self.version = 0  # bumped on every change of the rendered text (the store caches its gzip member)

    def on_job(self, deleted: bool, job: Job) -> None:
        """Observe what this version of the Job newly shows; forget the Job when it is deleted."""
        series = (job.queue, job.priority_class)
        wait, run = self._series(self.waits, WAIT, series), self._series(self.runs, RUN, series)
        if not job.uid:
            return  # nothing to remember it by: never observed (the model counts the problem)
        seen = self.seen.get(job.uid)
        if seen is None:
            seen = self.seen[job.uid] = Seen()
        started, finished = job.start_time, job.finish_time
        if started is not None and (seen.started is None or started > seen.started):
            seen.started = started
            queued = job.run_queued_time if job.run_queued_time is not None else job.creation_timestamp
            if started > self.observe_since and queued is not None:
                wait.observe(max(0.0, started - queued))
                self.version += 1
        if finished is not None and started is not None and (seen.finished is None or finished > seen.finished):
            seen.finished = finished
            if finished > self.observe_since:
                run.observe(max(0.0, finished - started))
                self.version += 1
        if deleted:
            del self.seen[job.uid]

    def _series(self, table: dict[Series, Histogram], family: Family, series: Series) -> Histogram:
        histogram = table.get(series)
        if histogram is None:
            histogram = table[series] = Histogram(family, series)
            self.version += 1
        return histogram

    def write(self, out: list[bytes], allows: Callable[[str], bool] = lambda name: True) -> None:
        """Both histograms, those `allows` (the exporter's family filter) lets through."""
        for family, table in ((WAIT, self.waits), (RUN, self.runs)):
            if table and allows(family.name):
                out.append(family.header.encode())
                out.extend(table[key].text for key in sorted(table))
