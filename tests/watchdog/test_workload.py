import pytest

from watchdog.workload import workload_name


@pytest.mark.parametrize(("job", "workload"), [
    ("etl-daily-7k2p", "etl-daily"), ("report-gen-ljlf", "report-gen"), ("train-20240501-1200", "train"),
    ("job-7", "job"), ("bert-base", "bert-base"), ("mnist-ddp", "mnist-ddp"), ("llm", "llm"), ("7k2p", "7k2p"),
])
def test_run_suffixes_are_stripped(job: str, workload: str) -> None:
    assert workload_name(job) == workload


def test_a_configured_label_wins() -> None:
    assert workload_name("etl-daily-7k2p", {"app": "etl"}, "app") == "etl"
    assert workload_name("etl-daily-7k2p", {}, "app") == "etl-daily"
