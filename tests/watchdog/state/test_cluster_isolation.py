"""Issue 32: nothing one cluster's leader does may touch another cluster's rows. Two watchdogs share one database
(clusters "a" and "b", seeded alike: the same UIDs, fingerprints, queues and keys); "a" runs each leader operation
of the issue (retention both ways incl. downsampling, reconcile on takeover, resolve-missing, capability, OOM
resubmissions, the outbox, GPU-idle aborts, recommendation histograms, report digests, cost_retired) and every row
of "b" stays exactly as it was, while "a" gets the result a watchdog alone in its database would get.
SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, inspect, select, update
from sqlalchemy.orm import Session

from volcano_monitor.core.model import parse_job
from volcano_monitor.simulator.chatinbox import ChatInbox
from volcano_monitor.watchdog.actions.capability.guardrails import QueuePlan
from volcano_monitor.watchdog.actions.capability.store import (
    CapabilityChange,
    get_plan,
    last_applied_at,
    record_change,
    save_plan,
    usage_buckets,
)
from volcano_monitor.watchdog.actions.gpu_idle.abort import DRY_RUN, GpuIdleAborter
from volcano_monitor.watchdog.actions.gpu_idle.settings import GpuIdleSettings
from volcano_monitor.watchdog.actions.notify import outbox
from volcano_monitor.watchdog.actions.notify.message import AlertItem
from volcano_monitor.watchdog.actions.notify.outbox import Outbox
from volcano_monitor.watchdog.actions.notify.sender import Notifier
from volcano_monitor.watchdog.actions.oomscale import store as oom_store
from volcano_monitor.watchdog.config import Settings, load
from volcano_monitor.watchdog.findings.detectors.gpuidle import GPU_IDLE
from volcano_monitor.watchdog.findings.recommendations.book import HistogramBook
from volcano_monitor.watchdog.runtime import retention
from volcano_monitor.watchdog.runtime.retention import run_retention
from volcano_monitor.watchdog.runtime.settings import Retention
from volcano_monitor.watchdog.state.alerts import AlertBook
from volcano_monitor.watchdog.state.cost_settings import Costs
from volcano_monitor.watchdog.state.db.engine import make_engine
from volcano_monitor.watchdog.state.db.models import (
    Alert,
    CapabilityPlan,
    CostRetired,
    GpuIdleAbortRow,
    JobRun,
    NotificationDelivery,
    NotificationEntry,
    NotificationGroup,
    OomResubmission,
    ReportDigestSent,
    UsageRollup,
    UsageRollupHourly,
    WorkloadHistogram,
)
from volcano_monitor.watchdog.state.db.models import (
    CapabilityChange as ChangeRow,
)
from volcano_monitor.watchdog.state.db.scope import fleet
from volcano_monitor.watchdog.state.ledger import Ledger, enforce_retention
from volcano_monitor.watchdog.state.prices import queue_cost_totals
from volcano_monitor.watchdog.views.report.digest import queue_digest
from volcano_monitor.watchdog.views.report.settings import Digest

NOW = datetime(2026, 12, 6, 12, 7, tzinfo=UTC)
DAY = timedelta(days=1)
MODELS: tuple[type[Any], ...] = (
    JobRun, CostRetired, UsageRollup, UsageRollupHourly, Alert, NotificationGroup, NotificationEntry,
    NotificationDelivery, CapabilityPlan, ChangeRow, OomResubmission, GpuIdleAbortRow, WorkloadHistogram,
    ReportDigestSent)
DOWNSAMPLED = NOW.replace(minute=0) - 3 * DAY  # an hour old enough to move to the hourly table
B_ONLY_BUCKETS = [NOW.replace(minute=0) - timedelta(hours=2) + timedelta(minutes=5 * i) for i in range(6)]


@pytest.fixture(autouse=True)
def _no_pause(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(retention, "SQLITE_PAUSE", 0.0)


def _run(uid: str, **kw: Any) -> JobRun:
    values: dict[str, Any] = {"namespace": "ml", "name": uid, "workload": "train", "queue": "q", "queue_path": "q",
                              "phase": "Running", "started_at": NOW - 10 * DAY, "requested_gpus": 1.0,
                              "gpu_seconds_requested": 3600.0, "cost_gpu_requested": 2.0, "updated_at": NOW - DAY}
    return JobRun(uid=uid, **(values | kw))


def _rollup(model: type[Any], start: datetime, pod: str = "p0", queue: str = "q", **kw: Any) -> Any:
    values: dict[str, Any] = {
        "bucket_start": start, "bucket_seconds": 3600 if model is UsageRollupHourly else 300, "namespace": "ml",
        "pod": pod, "container": "main", "job_uid": "u-open", "workload": "train", "queue": queue, "samples": 10,
        "cpu_cores_sum": 5.0, "cpu_cores_max": 1.0, "memory_bytes_sum": 1e10, "memory_bytes_max": 2e9,
        "gpu_samples": 10, "gpu_util_sum": 500.0, "gpu_util_max": 60.0, "cpu_request_cores": 1.0,
        "memory_request_bytes": 4e9, "gpu_request": 1.0}
    return model(**(values | kw))


def _alert(fp: str, state: str, kind: str = "JobIdle", **kw: Any) -> Alert:
    values: dict[str, Any] = {"severity": "warning", "namespace": "ml", "queue": "research", "job_name": "train-u1",
                              "subject": "train-u1", "details": {"job_uid": "u1", "idle_seconds": 900.0},
                              "started_at": NOW - 2 * DAY, "fired_at": NOW - 2 * DAY, "last_seen_at": NOW,
                              "updated_at": NOW}
    return Alert(fingerprint=fp, kind=kind, state=state, **(values | kw))


def _seed(engine: Engine, name: str) -> None:
    """The same rows in every cluster (besides `identity`, which names it); "b" has a few more of its own."""
    old = NOW - 400 * DAY
    with Session(engine) as s, s.begin():
        s.add_all([_run("u-old", phase="Completed", finished_at=old, updated_at=old),  # past jobs_days
                   _run("u-done", phase="Completed", finished_at=NOW - DAY),
                   _run("u-open"), _run("u1", queue="research")])
        s.add(CostRetired(queue="q", requested=5.0, used=2.0, idle=3.0))
        s.add_all([_rollup(UsageRollup, NOW - 30 * DAY),  # past usage_days
                   _rollup(UsageRollup, DOWNSAMPLED), _rollup(UsageRollup, DOWNSAMPLED + timedelta(minutes=5)),
                   _rollup(UsageRollup, NOW.replace(minute=0) - timedelta(minutes=5)),
                   _rollup(UsageRollupHourly, NOW - 30 * DAY, buckets=12, cpu_cores_mean_max=0.5, gpus_used_max=0.6)])
        s.add_all([_alert("f-old", "resolved", started_at=old, fired_at=old, resolved_at=old),  # past alerts_days
                   _alert("f-open", "firing"), _alert("f-idle", "firing", kind=GPU_IDLE)])
        stale = NOW - 30 * DAY
        groups = [NotificationGroup(group_key=key, receiver="chat", route="0", labels={}, flush_at=flush,
                                    last_flush_at=None, created_at=stale, updated_at=stale)
                  for key, flush in (("g-empty", None), ("g-live", NOW - timedelta(minutes=1)))]
        s.add_all(groups)
        s.flush()
        live = groups[1].id
        s.add(NotificationEntry(group_id=live, fingerprint="f-open", status="firing", notified_status=None,
                                alert={"kind": "JobIdle", "severity": "warning", "status": "firing",
                                       "summary": "idle", "fingerprint": "f-open"}, changed_at=NOW))
        for state, updated in (("sent", stale), ("sending", NOW), ("pending", NOW)):
            s.add(NotificationDelivery(group_id=live, receiver="chat", state=state, message={"to": name},
                                       next_attempt_at=NOW - timedelta(minutes=1), created_at=updated,
                                       updated_at=updated, claimed_by="x" if state == "sending" else None))
        s.add(CapabilityPlan(queue="q", policy="share", mode="dry-run", outcome="dry_run", resources={}, inputs={},
                             identity=name, planned_at=NOW - DAY))
        s.add(ChangeRow(queue="q", policy="share", mode="apply", outcome="applied", before={}, after={}, why={},
                        inputs={}, identity=name, created_at=NOW - DAY))
        s.add(OomResubmission(namespace="ml", lineage="train", lineage_uid="L", attempt=1, source_name="train",
                              source_uid="L", new_name="train-oom1", mode="apply", outcome="applied", containers={},
                              identity=name, created_at=NOW - DAY, updated_at=NOW - DAY))
        s.add(WorkloadHistogram(namespace="ml", workload="gone", task="", container="main", cpu={}, memory={},
                                samples=5, last_sample_at=NOW - 60 * DAY, updated_at=NOW - 60 * DAY))
        s.add(ReportDigestSent(name="weekly", period_start=NOW - 7 * DAY, period_end=NOW, receiver="chat",
                               delivery_id=None, identity=name, created_at=NOW))
        if name == "b":  # rows "a" has no twin of: an abort already recorded, buckets of another queue
            s.add(GpuIdleAbortRow(job_uid="u1", namespace="ml", job_name="train-u1", queue="research", mode="dry-run",
                                  state=DRY_RUN, identity=name, created_at=NOW - DAY))
            s.add(_alert("f-b-only", "firing"))
            s.add_all([_rollup(UsageRollup, start, pod="p9", queue="other", memory_bytes_max=9e9)
                       for start in B_ONLY_BUCKETS])


@pytest.fixture
def clusters(engine: Engine, database_url: str) -> Iterator[tuple[Engine, Engine]]:
    a, b = make_engine(database_url, cluster="a"), make_engine(database_url, cluster="b")
    try:
        _seed(b, "b")
        _seed(a, "a")
        yield a, b
    finally:
        a.dispose()
        b.dispose()


def _rows(engine: Engine, cluster: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every column of every row of `cluster`, per table (read across clusters with fleet())."""
    out: dict[str, list[tuple[Any, ...]]] = {}
    with Session(engine) as session:
        for model in MODELS:
            keys = [c.key for c in inspect(model).column_attrs]
            rows = session.scalars(fleet(select(model), [cluster])).all()
            out[model.__tablename__] = sorted(tuple(repr(getattr(r, k)) for k in keys) for r in rows)
    return out


@pytest.fixture
def b_unchanged(clusters: tuple[Engine, Engine]) -> Iterator[None]:
    """Cluster "b"'s rows after the test are exactly those before it (and there are some of every table)."""
    a, _ = clusters
    before = _rows(a, "b")
    assert all(before.values()), [t for t, rows in before.items() if not rows]
    yield
    assert _rows(a, "b") == before


def _count(engine: Engine, model: type[Any]) -> int:
    with Session(engine) as session:
        return len(session.scalars(select(model)).all())


@pytest.mark.usefixtures("b_unchanged")
def test_enforce_retention_removes_only_its_own_clusters_rows(clusters: tuple[Engine, Engine]) -> None:
    a, _ = clusters
    with Session(a) as session, session.begin():
        counts = enforce_retention(session, Retention(), NOW)
    assert counts == {"usage_rollups": 1, "usage_rollups_hourly": 1, "job_runs": 1, "alerts": 1}
    with Session(a) as session:
        retired = session.scalars(select(CostRetired)).one()
        assert (retired.cluster, retired.queue, retired.requested) == ("a", "q", 5.0 + 2.0)  # u-old's GPU cost
        # the /metrics counters: its ledger's runs (u-done, u-open: 2.0 each) plus what it retired
        assert queue_cost_totals(session, Costs())["q"][0] == pytest.approx(7.0 + 4.0)


@pytest.mark.usefixtures("b_unchanged")
def test_chunked_retention_and_downsampling_touch_only_its_own_cluster(clusters: tuple[Engine, Engine]) -> None:
    a, _ = clusters
    counts = run_retention(a, Settings(retention=Retention(chunk_rows=100)), NOW, pace=False)
    assert {k: v for k, v in counts.items() if k not in ("chunks", "stopped")} == {
        "usage_rollups": 1, "usage_rollups_downsampled": 2, "usage_rollups_hourly": 1, "job_runs": 1, "alerts": 1}
    with Session(a) as session:
        hourly = session.scalars(select(UsageRollupHourly)).one()  # the two 5-minute rows of one hour, merged
        assert (hourly.cluster, hourly.bucket_start, hourly.buckets, hourly.samples) == ("a", DOWNSAMPLED, 2, 20)
        assert session.scalars(select(CostRetired.requested)).one() == 7.0


@pytest.mark.usefixtures("b_unchanged")
def test_reconcile_on_takeover_marks_gone_only_its_own_runs(clusters: tuple[Engine, Engine]) -> None:
    a, _ = clusters
    ledger = Ledger()
    with Session(a) as session, session.begin():  # the informers' relist, then the reconcile
        ledger.on_job("MODIFIED", parse_job({
            "metadata": {"name": "u-done", "namespace": "ml", "uid": "u-done",
                         "creationTimestamp": "2026-12-01T00:00:00Z"},
            "spec": {"queue": "q2"}, "status": {"state": {"phase": "Completed"}}}), session, NOW)
        assert ledger.retag_queues(session, {"q": "root/q"}) == 2  # u-old (bare path) and u-open (open)
        assert ledger.mark_gone(session, {"u-done"}, NOW) == 3  # u-old, u-open, u1: none is live
    with Session(a) as session:
        assert session.execute(select(JobRun.uid).where(JobRun.object_deleted.is_(False))).scalars().all() == [
            "u-done"]


@pytest.mark.usefixtures("b_unchanged")
def test_alert_book_loads_and_resolves_only_its_own_alerts(clusters: tuple[Engine, Engine]) -> None:
    a, _ = clusters
    book = AlertBook()
    with Session(a) as session:
        book.load(session)
    assert book.state("f-b-only") is None and book.state("f-open") == "firing"
    with Session(a) as session, session.begin():
        transitions = book.resolve_missing({"JobIdle"}, set(), session, NOW)
    assert [t.fingerprint for t in transitions] == ["f-open"]
    with Session(a) as session, session.begin():  # a person's request naming "b"'s alert is not "a"'s to do
        theirs = session.scalars(fleet(select(Alert.id).where(Alert.fingerprint == "f-idle"), ["b"])).one()
        assert book.resolve_by_hand(theirs, session, NOW) == ("no_such_alert", [])
    with Session(a) as session:
        assert session.execute(select(Alert.fingerprint, Alert.state).order_by(Alert.fingerprint)).all() == [
            ("f-idle", "firing"), ("f-old", "resolved"), ("f-open", "resolved")]


@pytest.mark.usefixtures("b_unchanged")
def test_capability_plans_changes_and_demand_usage_are_its_own(clusters: tuple[Engine, Engine]) -> None:
    a, _ = clusters
    with Session(a) as session, session.begin():
        save_plan(session, QueuePlan(queue="q", policy="demand", resources={}, inputs={}), "apply", "applied", "a2",
                  NOW)
        record_change(session, CapabilityChange(queue="q", policy="demand", mode="apply", outcome="applied",
                                                before={}, after={}, why={}, at=NOW, identity="a2"))
    with Session(a) as session:
        plan = get_plan(session, "q")
        assert plan is not None and (plan.cluster, plan.policy, plan.identity) == ("a", "demand", "a2")
        assert last_applied_at(session, "q") == NOW
        # "b"'s buckets of another queue are not buckets in which "a"'s queue used nothing: "a" has one bucket in
        # the window, so one figure (the hour's downsampled ones are older)
        window = usage_buckets(session, "q", NOW - DAY, NOW)
    assert len(window) == 1 and window[0]["gpu"] == pytest.approx(0.5)


@pytest.mark.usefixtures("b_unchanged")
def test_oom_resubmissions_are_per_cluster(clusters: tuple[Engine, Engine]) -> None:
    a, _ = clusters
    with Session(a) as session, session.begin():
        found = oom_store.find(session, "ml", "L", 1)
        assert found is not None and found.identity == "a"
        assert oom_store.find(session, "ml", "L", 2) is None
        oom_store.insert(session, {"namespace": "ml", "lineage": "train", "lineage_uid": "L", "attempt": 2,
                                   "source_name": "train-oom1", "source_uid": "L1", "new_name": "train-oom2",
                                   "mode": "apply", "outcome": "pending", "containers": {}, "identity": "a"}, NOW)
    with Session(a) as session:
        assert oom_store.history(session, "ml", "train", 10, 0)[0] == 2
        assert oom_store.peak_memory(session, "u-open", "", "main") == 2e9  # "b"'s run of the same UID peaked higher


@pytest.mark.usefixtures("b_unchanged")
def test_the_outbox_sends_settles_and_forgets_only_its_own_messages(clusters: tuple[Engine, Engine]) -> None:
    a, _ = clusters
    with Session(a) as session:
        mine = {state: i for state, i in session.execute(select(NotificationDelivery.state, NotificationDelivery.id))}
        theirs = session.scalars(fleet(select(NotificationDelivery.id), ["b"])).all()
    with Session(a) as session, session.begin():
        assert [d.id for d in outbox.due_deliveries(session, NOW)] == []  # its group's "sending" one goes first
        assert outbox.settle_inflight(session, NOW) == [(mine["sending"], "chat")]
        assert [d.id for d in outbox.due_deliveries(session, NOW)] == [mine["pending"]]
        assert not any(outbox.claim(session, i, "a-sender", NOW) for i in theirs)
        assert outbox.claim(session, mine["pending"], "a-sender", NOW)
        outbox.mark(session, mine["pending"], "a-sender", NOW, state=outbox.SENT)
        assert outbox.outbox_counts(session) == {}
        assert outbox.forget_delivered(session, NOW, days=7) == 1  # the old sent one
    with Session(a) as session:
        assert session.scalars(select(NotificationGroup.group_key)).all() == ["g-live"]  # g-empty forgotten
        assert sorted(session.scalars(select(NotificationDelivery.state))) == ["sent", "uncertain"]


def test_the_outbox_groups_and_flushes_only_its_own_alerts(clusters: tuple[Engine, Engine]) -> None:
    """The same alert in both clusters: a group each (the group key is unique per cluster), and "a"'s flush
    turns only its own group into a message."""
    a, b = clusters
    box = Outbox(load(None, environ={}, notifications={
        "receivers": [{"name": "chat", "webhook": {"url": "http://127.0.0.1:1/x"}}],
        "route": {"receiver": "chat", "group_wait": "0s"}}).notifications)
    item = AlertItem(kind="JobFailed", severity="critical", status="firing", summary="Job ml/train Failed",
                     namespace="ml", queue="q", job_name="train", fingerprint="fp-train")
    with Session(b) as session, session.begin():
        assert box.enqueue(session, item, NOW) == 1
    before = _rows(a, "b")
    with Session(a) as session, session.begin():
        assert box.enqueue(session, item, NOW) == 1
    with Session(a) as session, session.begin():
        assert box.flush_due(session, NOW + timedelta(minutes=1)) == 2  # g-live and the new group: its own
    assert _rows(a, "b") == before
    with Session(a) as session:
        assert len(session.scalars(select(NotificationGroup)).all()) == 3
        pending = session.scalars(select(NotificationDelivery).where(NotificationDelivery.state == "pending")).all()
        assert len(pending) == 3  # the seeded one and a message of each of its groups


@pytest.mark.usefixtures("b_unchanged")
def test_gpu_idle_aborts_record_its_own_run_beside_the_same_uid_of_another_cluster(
        clusters: tuple[Engine, Engine]) -> None:
    a, _ = clusters
    settings = GpuIdleSettings.model_validate({
        "queues": {"research": {"gpu_idle_limit_seconds": 600, "abort": True}},
        "abort": {"enabled": True, "mode": "dry-run", "grace_seconds": 300}})

    class Leading:
        def is_leader(self) -> bool:
            return True

    aborter = GpuIdleAborter(settings, a, None, Leading(), clock=NOW.timestamp, identity="a")
    for _ in range(2):
        assert aborter.run_once() == 0
    with Session(a) as session:
        rows = session.execute(select(GpuIdleAbortRow.cluster, GpuIdleAbortRow.job_uid, GpuIdleAbortRow.state)).all()
    assert rows == [("a", "u1", DRY_RUN)] and aborter.counts() == {("research", DRY_RUN): 1}


@pytest.mark.usefixtures("b_unchanged")
def test_recommendation_histograms_load_upsert_and_forget_per_cluster(clusters: tuple[Engine, Engine]) -> None:
    a, _ = clusters
    book = HistogramBook(Settings().recommendations)
    with Session(a) as session:
        book.reload(session)  # a new leader's takeover: its own rows only
    assert book.key_list() == [("ml", "gone", "", "main")]
    book.add_usage("ml", "gone", "", "main", NOW.timestamp(), 1.0, 1e9)  # the same key as "b"'s row
    with Session(a) as session, session.begin():
        assert book.flush(session, NOW) == 1
    with Session(a) as session:
        assert session.execute(select(WorkloadHistogram.samples, WorkloadHistogram.updated_at)).all() == [(6, NOW)]
    with Session(a) as session, session.begin():
        assert book.forget_idle(session, NOW + DAY) == 1
    assert _count(a, WorkloadHistogram) == 0


@pytest.mark.usefixtures("b_unchanged")
def test_report_digests_are_queued_once_per_cluster(clusters: tuple[Engine, Engine]) -> None:
    a, _ = clusters
    digest = Digest(name="weekly", schedule="0 9 * * mon", receiver="chat")
    with Session(a) as session, session.begin():
        assert not queue_digest(session, digest, (NOW - 7 * DAY, NOW), None, NOW)  # queued before, by "a"
        assert queue_digest(session, digest, (NOW - 14 * DAY, NOW - 7 * DAY), None, NOW)
    assert _count(a, ReportDigestSent) == 2


def test_the_sender_sends_only_its_own_clusters_messages(engine: Engine, database_url: str) -> None:
    """The same alert queued in both clusters; "a"'s sender posts one message and leaves "b"'s pending (its
    leader's sender posts it), and settling at takeover leaves "b"'s in-flight message alone."""
    box = ChatInbox(secrets={"dingtalk": "SECtest"}).start()
    a, b = make_engine(database_url, cluster="a"), make_engine(database_url, cluster="b")
    try:
        settings = load(None, environ={}, notifications={
            "receivers": [{"name": "team", "dingtalk": {"url": f"{box.url}/dingtalk/robot/send?access_token=tok",
                                                        "secret": "SECtest"}}],
            "route": {"receiver": "team", "group_wait": 0, "group_interval": 0},
            "delivery": {"poll_interval_seconds": 0.05, "timeout_seconds": 2}}).notifications
        item = AlertItem(kind="JobFailed", severity="critical", status="firing", summary="Job ml/train Failed",
                         namespace="ml", queue="q", job_name="train", fingerprint="fp-train")
        for eng in (b, a):
            with Session(eng) as session, session.begin():
                Outbox(settings).enqueue(session, item, datetime.now(UTC))
                Outbox(settings).flush_due(session, datetime.now(UTC))
        with Session(b) as session, session.begin():  # "b"'s sender is sending it right now
            session.execute(update(NotificationDelivery).values(state="sending", claimed_by="b-sender"))
        before = _rows(a, "b")
        assert [r[-1] for r in before["notification_deliveries"]] != []
        sender = Notifier(Outbox(settings), a, settings.delivery)
        with Session(a) as session, session.begin():
            assert outbox.settle_inflight(session, datetime.now(UTC)) == []
        sender.run_once()
        assert len(box.messages("dingtalk")) == 1
        assert _rows(a, "b") == before
        with Session(a) as session:
            assert session.scalars(select(NotificationDelivery.state)).all() == ["sent"]
    finally:
        box.stop()
        a.dispose()
        b.dispose()
