from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from volcano_monitor.simulator.chatinbox import ChatInbox
from volcano_monitor.watchdog.runtime.cli import main


def config(tmp_path: Path, url: str) -> Path:
    path = tmp_path / "watchdog.yaml"
    path.write_text(yaml.safe_dump({"notifications": {
        "receivers": [{"name": "team", "dingtalk": {"url": url, "secret": "SECsecret"}}],
        "route": {"receiver": "team"}}}))
    return path


def test_notify_test_sends_a_sample_and_reports(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with ChatInbox(secrets={"dingtalk": "SECsecret"}) as inbox:
        path = config(tmp_path, f"{inbox.url}/dingtalk/robot/send?access_token=tok-123")
        assert main(["--config", str(path), "notify-test", "--receiver", "team"]) == 0
        [message] = inbox.messages()
        assert "TEST" in message.body["markdown"]["text"] and "sign" in message.query
        assert "delivered to team (dingtalk)" in capsys.readouterr().out
        inbox.fail("errcode", 1)
        assert main(["--config", str(path), "notify-test", "--receiver", "team"]) == 1
        err = capsys.readouterr().err
        assert "failed" in err and "tok-123" not in err and "SECsecret" not in err
    assert main(["--config", str(path), "notify-test", "--receiver", "nobody"]) == 2
    assert "no receiver named 'nobody' (receivers: team)" in capsys.readouterr().err
