"""UsageRecorder: attribution, integrals for the ledger, rollups, histograms, and flushing into both
databases (merge semantics, rollback keeps deltas, pending ledger rows)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session

from volcano_monitor.watchdog.state.db.models import JobRun, UsageRollup
from volcano_monitor.watchdog.state.rollups import UsageRecorder
from volcano_monitor.watchdog.state.samples import PodInfo, UsageSample

T0 = 1_699_999_800.0  # a multiple of 300: buckets start at T0
GIB = 2.0**30


class FakeBook:
    """Records what the recorder hands to the HistogramBook."""

    def __init__(self) -> None:
        self.usage: list[tuple[Any, ...]] = []
        self.ooms: list[tuple[Any, ...]] = []

    def add_usage(self, namespace: str, workload: str, task: str, container: str, ts: float,
                  cpu_cores: float, memory_bytes: float) -> None:
        self.usage.append((namespace, workload, task, container, ts, cpu_cores, memory_bytes))

    def add_oom(self, namespace: str, workload: str, task: str, container: str, ts: float,
                memory_bytes: float) -> None:
        self.ooms.append((namespace, workload, task, container, ts, memory_bytes))


def info(uid: str = "uid-1", cpu: float = 2.0, memory: float = 4 * GIB, gpus: float = 0.0) -> PodInfo:
    return PodInfo(job_uid=uid, job_name="train-7k2p", namespace="team-a", workload="train", task="worker",
                   queue="q1", phase="Running", cpu_request_cores=cpu, memory_request_bytes=memory, gpus=gpus)


def lookup(known: dict[tuple[str, str], PodInfo]) -> Any:
    return lambda namespace, pod: known.get((namespace, pod))


def add_run(session: Session, uid: str = "uid-1") -> None:
    now = datetime.fromtimestamp(T0, UTC)
    session.add(JobRun(uid=uid, namespace="team-a", name="train-7k2p", workload="train", updated_at=now))
    session.flush()


def run_row(engine: Engine, uid: str = "uid-1") -> JobRun:
    with Session(engine) as session:
        return session.scalars(select(JobRun).where(JobRun.uid == uid)).one()


def at(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, UTC)


def test_integrals_one_core_of_two_for_600_seconds(engine: Engine) -> None:
    book = FakeBook()
    recorder = UsageRecorder(book, expected_interval_seconds=30)
    pods = lookup({("team-a", "train-0"): info(gpus=2)})
    samples = [UsageSample(T0 + i * 30, "team-a", "train-0", "main", 1.0, GIB, 50.0, 2) for i in range(21)]
    with Session(engine) as session:
        add_run(session)
        assert recorder.ingest(samples, pods) == 21
        written = recorder.flush(session, at(T0 + 600))
        session.commit()
    assert written == 3 + 1  # buckets T0, T0+300, T0+600 and one job row
    run = run_row(engine)
    assert run.cpu_core_seconds_used == pytest.approx(600, rel=0.01)
    assert run.cpu_core_seconds_requested == pytest.approx(1200, rel=0.01)
    assert run.memory_byte_seconds_used == pytest.approx(600 * GIB, rel=0.01)
    assert run.memory_byte_seconds_requested == pytest.approx(2400 * GIB, rel=0.01)
    assert run.gpu_seconds_used == pytest.approx(600, rel=0.01)  # 50% of 2 GPUs
    assert run.gpu_seconds_requested == pytest.approx(1200, rel=0.01)
    assert len(book.usage) == 21
    assert book.usage[0] == ("team-a", "train", "worker", "main", T0, 1.0, GIB)


def test_first_sample_stands_for_its_window() -> None:
    recorder = UsageRecorder(FakeBook(), expected_interval_seconds=30)
    pods = lookup({("team-a", "p"): info(gpus=1), ("team-a", "q"): info(uid="u2")})
    recorder.ingest([UsageSample(T0 + i * 30, "team-a", "p", "main", 1.0, GIB, 100.0, 1, window=30.0)
                     for i in range(21)], pods)
    recorder.ingest([UsageSample(T0 + i * 30, "team-a", "q", "main", 1.0, GIB, window=float(w))
                     for i, w in enumerate(["nan", 900, 30])], pods)
    cpu_used, cpu_requested, _, _, gpu_used, gpu_requested = recorder._jobs["uid-1"][:6]
    assert (cpu_used, cpu_requested, gpu_used, gpu_requested) == pytest.approx((630, 1260, 630, 630))
    assert recorder._jobs["u2"][0] == pytest.approx(60)  # NaN window: nothing; later ones: the intervals


def test_polled_faster_than_the_source_publishes_counts_each_report_over_its_window() -> None:
    """metrics-server publishes every 60 s (its resolution, the reports' `window`); the watchdog polls
    every 10 s: five polls in six repeat a report (dropped), and each new one stands for the whole 60 s,
    not for twice the poll interval (which undercounted three times)."""
    recorder = UsageRecorder(FakeBook(), expected_interval_seconds=10)
    pods = lookup({("team-a", "p"): info()})
    polls = [UsageSample(T0 + (t // 60) * 60, "team-a", "p", "main", 1.0, GIB, window=60.0) for t in range(0, 610, 10)]
    recorder.ingest(polls, pods)
    assert recorder.duplicates == 50
    assert recorder._jobs["uid-1"][0] == pytest.approx(600 + 20)  # ten 60-s reports, the first one capped at 20 s


def test_a_report_missed_by_a_late_poll_is_covered_by_the_next_one() -> None:
    """The source publishes every second and the watchdog polls twice as often; a poll late by a
    moment misses one report, and the next report's rate stands for it. A longer outage counts twice
    the report interval, not its whole length."""
    recorder = UsageRecorder(FakeBook(), expected_interval_seconds=0.5)
    pods = lookup({("team-a", "p"): info()})
    reports = [UsageSample(T0 + t, "team-a", "p", "main", 1.0, GIB, window=1.0) for t in (0, 1, 2, 4, 5, 9, 10)]
    recorder.ingest(reports, pods)
    used, requested = recorder._jobs["uid-1"][:2]
    assert used == pytest.approx(1 + 1 + 1 + 2 + 1 + 2 + 1)  # the report at 3 missed; 6, 7, 8 missed: capped at 2
    assert requested == pytest.approx(2 * used)


def test_a_deleted_pods_state_is_forgotten() -> None:
    recorder = UsageRecorder(FakeBook(), expected_interval_seconds=30)
    pods = lookup({("team-a", "p"): info(), ("team-a", "q"): info()})
    for pod in ("p", "q"):
        recorder.ingest([UsageSample(T0, "team-a", pod, c, 1.0, GIB) for c in ("a", "b")], pods)
    recorder.forget_pod("team-a", "p")
    assert set(recorder._containers) == {("team-a", "q", "a"), ("team-a", "q", "b")}
    assert set(recorder._pods) == {("team-a", "q")}


def test_multi_container_pod_counts_its_request_once(engine: Engine) -> None:
    recorder = UsageRecorder(FakeBook(), expected_interval_seconds=30)
    pods = lookup({("team-a", "p"): info(cpu=4.0)})
    samples = [UsageSample(T0 + i * 30, "team-a", "p", c, 0.5, GIB) for i in range(11) for c in ("a", "b")]
    with Session(engine) as session:
        add_run(session)
        recorder.ingest(samples, pods)
        recorder.flush(session, at(T0 + 300))
        session.commit()
    run = run_row(engine)
    assert run.cpu_core_seconds_used == pytest.approx(300.0)  # 2 containers x 0.5 core x 300 s
    assert run.cpu_core_seconds_requested == pytest.approx(1200.0)  # 4 cores x 300 s, not twice


def test_gaps_are_capped_and_duplicates_dropped() -> None:
    recorder = UsageRecorder(FakeBook(), expected_interval_seconds=30)
    pods = lookup({("team-a", "p"): info()})
    recorder.ingest([UsageSample(T0, "team-a", "p", "main", 1.0, GIB),
                     UsageSample(T0 + 1000, "team-a", "p", "main", 1.0, GIB),  # gap: counts 60 s
                     UsageSample(T0 + 1000, "team-a", "p", "main", 1.0, GIB),  # metrics-server repeating itself
                     UsageSample(T0 + 500, "team-a", "p", "main", 1.0, GIB)], pods)  # out of order
    assert recorder.duplicates == 2
    delta = recorder._jobs["uid-1"]
    assert delta[0] == pytest.approx(60.0)
    assert delta[1] == pytest.approx(120.0)


def test_unknown_pods_and_bad_values_are_counted_not_stored() -> None:
    book = FakeBook()
    recorder = UsageRecorder(book)
    pods = lookup({("team-a", "p"): info()})
    accepted = recorder.ingest([
        UsageSample(T0, "team-a", "ghost", "main", 1.0, GIB),
        UsageSample(T0, "team-a", "ghost", "side", 1.0, GIB),
        UsageSample(float("nan"), "team-a", "p", "main", 1.0, GIB),
        UsageSample(T0, "team-a", "p", "main", float("inf"), -5.0),
        UsageSample(T0 + 1, "team-a", "p", "main", None, 3 * GIB),  # memory only: kept, no histogram
        UsageSample(T0 + 2, "team-a", "p", "main", 1e300, 3 * GIB, 250.0),  # absurd CPU and GPU util
        UsageSample(T0, "team-a", "p", "nul\x00", 1.0, GIB),  # PostgreSQL would refuse the name
        UsageSample(T0, "team-a", "p", "c" * 254, 1.0, GIB),  # would not fit the column
        UsageSample(1e20, "team-a", "p", "main", 1.0, GIB),  # no datetime for that
    ], pods)
    assert accepted == 2
    assert recorder.unattributed == 2
    assert recorder.invalid == 5
    assert recorder.bad_values == 4
    assert book.usage == []
    r = recorder._rollups[(int(T0), "team-a", "p", "main")]
    assert r[:8] == [2, 0.0, 0.0, 6 * GIB, 3 * GIB, 0, 0.0, 0.0]


def test_rollups_are_few_and_merge_across_flushes_and_restarts(engine: Engine) -> None:
    pods = lookup({("team-a", f"p{i}"): info(uid=f"u{i}") for i in range(20)})
    samples = [UsageSample(T0 + t, "team-a", f"p{i}", "main", 0.1 * (i + 1) + t / 6000, GIB * (1 + t / 600))
               for t in range(0, 600, 10) for i in range(20)]
    # first writes the open bucket at every flush (many merges of one row); second, after a
    # restart, the default way (finished buckets, and the open one at the end)
    first, second = UsageRecorder(FakeBook(), current_bucket_write_seconds=0), UsageRecorder(FakeBook())
    with Session(engine) as session:
        for n, t in enumerate(range(0, 600, 10)):  # flush every round, as the app does
            round_samples = [s for s in samples if s.ts == T0 + t]
            (first if t < 330 else second).ingest(round_samples, pods)
            (first if t < 330 else second).flush(session, at(T0 + t))
            if n % 7 == 0:
                session.commit()
        second.flush(session, at(T0 + 600), final=True)
        session.commit()
        rows = session.scalars(select(UsageRollup).order_by(UsageRollup.pod, UsageRollup.bucket_start)).all()
        assert len(samples) == 1200
        assert len(rows) == 40  # 20 containers x 2 buckets of 300 s
        p0 = [r for r in rows if r.pod == "p0"]
        assert [r.samples for r in p0] == [30, 30]
        assert p0[0].bucket_start == at(T0) and p0[0].bucket_seconds == 300
        expect = [s for s in samples if s.pod == "p0" and s.ts < T0 + 300]
        assert p0[0].cpu_cores_sum == pytest.approx(sum(s.cpu_cores or 0 for s in expect))
        assert p0[0].cpu_cores_max == pytest.approx(max(s.cpu_cores or 0 for s in expect))
        assert p0[1].memory_bytes_max == pytest.approx(GIB * (1 + 590 / 600))
        assert (p0[0].job_uid, p0[0].workload, p0[0].task, p0[0].queue) == ("u0", "train", "worker", "q1")
        assert p0[0].cpu_request_cores == 2.0 and p0[0].memory_request_bytes == 4 * GIB


def test_rolled_back_flush_is_written_by_the_next_one(engine: Engine) -> None:
    recorder = UsageRecorder(FakeBook(), expected_interval_seconds=30)
    pods = lookup({("team-a", "p"): info()})
    with Session(engine) as session:
        add_run(session)
        session.commit()
    recorder.ingest([UsageSample(T0 + i * 30, "team-a", "p", "main", 1.0, GIB) for i in range(5)], pods)
    with Session(engine) as session:
        assert recorder.flush(session, at(T0 + 120)) == 2
        session.rollback()  # e.g. the database went away before the commit
    assert recorder.restored_batches == 1
    recorder.ingest([UsageSample(T0 + i * 30, "team-a", "p", "main", 1.0, GIB) for i in range(5, 11)], pods)
    with Session(engine) as session:
        recorder.flush(session, at(T0 + 300))
        session.commit()
    with Session(engine) as session:  # a committed flush is not written again
        assert recorder.flush(session, at(T0 + 330), final=True) == 1  # just the open bucket's one sample
        session.commit()
        rows = session.scalars(select(UsageRollup).order_by(UsageRollup.bucket_start)).all()
    assert [r.samples for r in rows] == [10, 1]
    assert run_row(engine).cpu_core_seconds_used == pytest.approx(300.0)


def test_open_bucket_is_written_once_per_bucket_length(engine: Engine) -> None:
    recorder = UsageRecorder(FakeBook())
    pods = lookup({("team-a", "p"): info()})
    written = []
    with Session(engine) as session:
        add_run(session)
        for i in range(20):  # T0 .. T0+570, one sample and one flush every 30 s
            recorder.ingest([UsageSample(T0 + i * 30, "team-a", "p", "main", 1.0, GIB)], pods)
            written.append(recorder.flush(session, at(T0 + i * 30 + 5)))
            session.commit()
        rows = session.scalars(select(UsageRollup).order_by(UsageRollup.bucket_start)).all()
    # every flush updates the job row; rollups: the open bucket at the first flush, bucket T0 when
    # it finished (T0+305), the open bucket T0+300 at T0+305 too (300 s after the first write)
    assert written == [2] + [1] * 9 + [3] + [1] * 9
    assert [(r.bucket_start, r.samples) for r in rows] == [(at(T0), 10), (at(T0 + 300), 1)]
    with Session(engine) as session:
        assert recorder.flush(session, at(T0 + 600)) == 1  # bucket T0+300 finished: written
        session.commit()
        assert session.scalars(select(UsageRollup.samples).order_by(UsageRollup.bucket_start)).all() == [10, 10]


def test_flush_error_keeps_the_deltas(engine: Engine) -> None:
    recorder = UsageRecorder(FakeBook())
    recorder.ingest([UsageSample(T0, "team-a", "p", "main", 1.0, GIB)], lookup({("team-a", "p"): info()}))
    with Session(engine) as session:
        session.connection().exec_driver_sql("DROP TABLE usage_rollups")
        with pytest.raises(Exception, match="usage_rollups"):
            recorder.flush(session, at(T0))
        session.rollback()
    assert (int(T0), "team-a", "p", "main") in recorder._rollups


def test_usage_of_a_run_without_ledger_row_waits_then_expires(engine: Engine) -> None:
    recorder = UsageRecorder(FakeBook(), expected_interval_seconds=30, pending_job_seconds=600)
    pods = lookup({("team-a", "p"): info(uid="late"), ("team-a", "q"): info(uid="never")})
    recorder.ingest([UsageSample(T0 + i * 30, "team-a", pod, "main", 1.0, GIB) for i in range(3) for pod in "pq"],
                    pods)
    with Session(engine) as session:
        assert recorder.flush(session, at(T0 + 60)) == 2  # two rollups, no job row yet
        session.commit()
        add_run(session, "late")
        assert recorder.flush(session, at(T0 + 90)) == 1
        session.commit()
        assert run_row(engine, "late").cpu_core_seconds_used == pytest.approx(60.0)
        assert recorder.flush(session, at(T0 + 1000)) == 0
        session.commit()
    assert recorder.dropped_job_deltas == 1
    assert recorder._jobs == {}
    with Session(engine) as session:
        assert session.scalar(select(func.count()).select_from(JobRun)) == 1


def test_columns_mixing_int_and_float_values_are_written(engine: Engine) -> None:
    """A pod without GPUs has gpus == 0 (an int from sum([])) next to pods with 1.0: PostgreSQL's
    array parameters refused such a column once; both runs' rows must be written."""
    recorder = UsageRecorder(FakeBook(), expected_interval_seconds=30)
    pods = lookup({("team-a", "a-0"): info("uid-1", gpus=0), ("team-a", "b-0"): info("uid-2", cpu=1, gpus=1.5)})
    samples = [UsageSample(T0 + i * 30, "team-a", pod, "main", 0.5 if pod == "a-0" else 1, GIB, None, 0)
               for i in range(3) for pod in ("a-0", "b-0")]
    with Session(engine) as session:
        add_run(session, "uid-1")
        add_run(session, "uid-2")
        recorder.ingest(samples, pods)
        assert recorder.flush(session, at(T0 + 600), final=True) >= 4
        session.commit()
    assert run_row(engine, "uid-1").cpu_core_seconds_used == pytest.approx(30, rel=0.01)
    assert run_row(engine, "uid-2").gpu_seconds_requested == pytest.approx(90, rel=0.01)


def test_a_bucket_closing_for_many_containers_is_written_over_several_flushes(engine: Engine) -> None:
    """The writer's transactions stay short: at most `max_rollups_per_flush` rollup rows each; nothing
    is lost, the rest goes with the next flushes (a shutdown's final flush takes everything)."""
    recorder = UsageRecorder(FakeBook(), expected_interval_seconds=30, max_rollups_per_flush=40)
    pods = lookup({("team-a", f"p{i}"): info() for i in range(100)})
    recorder.ingest([UsageSample(T0 + 10, "team-a", f"p{i}", "main", 1.0, GIB) for i in range(100)], pods)
    written = []
    with Session(engine) as session:
        add_run(session)
        for _ in range(3):
            written.append(recorder.flush(session, at(T0 + 400)))
        session.commit()
    assert written == [40 + 1, 40 + 0, 20 + 0]  # rollups (+ the job row, written with the first)
    with Session(engine) as session:
        assert session.scalar(select(func.count()).select_from(UsageRollup)) == 100
