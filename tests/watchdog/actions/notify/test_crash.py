"""kill -9 of the real watchdog between posting a message and recording it: after a restart the
message is not posted again (it is marked `uncertain`), and later messages still flow."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import yaml
from sqlalchemy import select
from sqlalchemy.orm import Session

from tests.simtools import wait_for
from tests.watchdog.harness import FAST_DETECTORS
from tests.watchdog.test_crash import start_cli
from volcano_monitor.simulator.chatinbox import ChatInbox, InboxMessage
from volcano_monitor.simulator.runtime import SimulatorThread, write_kubeconfig
from volcano_monitor.watchdog.state.db.engine import make_engine
from volcano_monitor.watchdog.state.db.models import NotificationDelivery


def alert_set(message: InboxMessage) -> frozenset[tuple[str, str, str]]:
    """The alert episodes a message tells. At speed 600 a gang's alert can resolve and fire again within a
    second (its queue fills and frees): that new episode, with its own start, is a new message, not the one
    in flight at the kill posted again."""
    return frozenset((a["fingerprint"], a["status"], a["started_at"]) for a in message.body["alerts"])


def test_kill_9_between_send_and_mark_posts_nothing_twice(database_url: str, tmp_path: Path) -> None:
    victim: list[subprocess.Popen[bytes]] = []
    killed_with: list[InboxMessage] = []

    def kill_on_first(message: InboxMessage) -> None:
        # Runs in the chat server before it answers: the watchdog has sent, and never hears back.
        if victim and not killed_with:
            killed_with.append(message)
            victim[0].send_signal(signal.SIGKILL)

    inbox = ChatInbox(on_message=kill_on_first).start()
    config = tmp_path / "watchdog.yaml"
    config.write_text(yaml.safe_dump({
        "detectors": {**FAST_DETECTORS, "idle_window_seconds": 600},  # 5-minute rollups
        "sources": {"metrics_api": {"interval_seconds": 0.5}},
        "notifications": {
            "receivers": [{"name": "inbox", "webhook": {"url": f"{inbox.url}/webhook/volcano"}}],
            # one group per alert kind and job; repeat_interval is the dedup window
            "route": {"receiver": "inbox", "group_by": ["alertname", "namespace", "job_name"], "group_wait": 0,
                      "group_interval": "1s", "repeat_interval": "1h"},
            "delivery": {"poll_interval_seconds": 0.1}}}))
    kubeconfig, log = tmp_path / "k.yaml", tmp_path / "watchdog.log"
    engine = make_engine(database_url)
    try:
        with SimulatorThread(scenario="default", speed=600, tick_interval=0.05) as sim:
            write_kubeconfig(kubeconfig, sim.url)
            first = start_cli(kubeconfig, database_url, config, log)
            victim.append(first)
            try:
                wait_for(lambda: bool(killed_with), timeout=90)
                assert first.wait(10) == -signal.SIGKILL
            finally:
                if first.poll() is None:
                    first.kill()
            with Session(engine) as session:
                in_flight = list(session.scalars(select(NotificationDelivery)
                                                 .where(NotificationDelivery.state == "sending")))
            assert len(in_flight) == 1, "the kill did not land between send and mark"
            killed_id = in_flight[0].id
            received_before = len(inbox.messages())
            second = start_cli(kubeconfig, database_url, config, log)
            try:
                wait_for(lambda: len(inbox.messages()) >= received_before + 3, timeout=90)  # messages flow again
                time.sleep(2)
            finally:
                second.terminate()
                assert second.wait(20) == 0, log.read_text()[-3000:]
    finally:
        inbox.stop()
    with Session(engine) as session:
        assert session.get(NotificationDelivery, killed_id).state == "uncertain"  # type: ignore[union-attr]
    messages = inbox.messages()
    posted = killed_with[0]
    same = [m for m in messages if m.body["group_key"] == posted.body["group_key"]
            and alert_set(m) == alert_set(posted)]
    assert same == [posted], "the message in flight at the kill was posted again"
    engine.dispose()
