import pytest

from volcano_monitor.watchdog.state.workload import workload_name


@pytest.mark.parametrize(("job", "workload"), [
    ("etl-daily-7k2p", "etl-daily"), ("report-gen-ljlf", "report-gen"), ("train-20240501-1200", "train"),
    ("job-7", "job"), ("bert-base", "bert-base"), ("mnist-ddp", "mnist-ddp"), ("llm", "llm"), ("7k2p", "7k2p"),
    # OOM auto scale-up's resubmissions belong to the first run's workload
    ("etl-daily-7k2p-oom1", "etl-daily"), ("train-20240501-1200-oom12", "train"), ("bloom-oom2", "bloom"),
    ("zoom", "zoom"), ("room-oomx", "room-oomx"),
])
def test_run_suffixes_are_stripped(job: str, workload: str) -> None:
    assert workload_name(job) == workload


def test_a_configured_label_wins() -> None:
    assert workload_name("etl-daily-7k2p", {"app": "etl"}, "app") == "etl"
    assert workload_name("etl-daily-7k2p", {}, "app") == "etl-daily"


def test_a_cronjob_owner_names_the_workload() -> None:
    """Jobs of a Volcano CronJob are `<cron>-<minute>`: stripping would also eat a cron's own numeric part."""
    assert workload_name("etl-2024-29000000") == "etl"  # what the suffix rule alone would say
    assert workload_name("etl-2024-29000000", owner_kind="CronJob", owner_name="etl-2024") == "etl-2024"
    assert workload_name("etl-2024-29000000", owner_kind="PyTorchJob", owner_name="etl-2024") == "etl"
    assert workload_name("x-29000000", {"app": "x-app"}, "app", "CronJob", "x") == "x-app"  # the label still wins
