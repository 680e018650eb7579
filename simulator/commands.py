"""Volcano's bus Commands, as its job controller consumes them.

A Command (`bus.volcano.sh/v1alpha1`) names an action and a target object. Volcano's job controller
watches them; for each one it first deletes the Command ("clean it up to make sure executed not more
than once"), records a `CommandIssued` Event on the Job and then runs the action through the job's
state machine: `AbortJob` on a Pending or Running Job kills its pods (finished ones kept), deletes the
PodGroup and writes phase `Aborting`; once no pod is left running the Job becomes `Aborted`.

A Command for a Job that does not exist (or whose UID no longer matches: a newer run of the same name)
is deleted all the same and does nothing, as in Volcano.
"""

from __future__ import annotations

from typing import Any

from volcano_monitor.simulator.resources import COMMANDS
from volcano_monitor.simulator.state import RunSim

# The actions a Command may carry that the simulated controller carries out (Volcano also knows
# ResumeJob/SuspendJob-like ones through AbortJob/ResumeJob; only the killing ones matter here).
COMMAND_ACTIONS = ("AbortJob", "CompleteJob", "TerminateJob", "RestartJob")
ISSUED_MESSAGE = "Start to execute command {action}, and clean it up to make sure executed not more than once."


def target_run(runs: dict[tuple[str, str], RunSim], command: dict[str, Any]) -> RunSim | None:
    """The live Volcano Job run the Command names (by namespace, name and, when given, UID)."""
    target = command.get("target") or {}
    if not isinstance(target, dict) or target.get("kind") != "Job":
        return None
    namespace = (command.get("metadata") or {}).get("namespace", "")
    run = runs.get((namespace, str(target.get("name", ""))))
    if run is None or not run.is_vcjob or run.orphaned or run.finished:
        return None
    uid = target.get("uid")
    if uid and uid != run.uid:
        return None
    return run


def consume(driver: Any, pending: list[tuple[str, str]]) -> int:
    """Carry out and delete the Commands named in `pending` (namespace, name); how many acted on a Job.
    `driver` is the simulator's Controllers (kept untyped to avoid an import cycle)."""
    acted = 0
    for namespace, name in pending:
        command = driver.store.get_copy(COMMANDS, namespace, name)
        if command is None:
            continue  # deleted meanwhile (by its author): nothing to do, as in Volcano
        driver._delete(COMMANDS, namespace, name)
        run = target_run(driver.runs, command)
        action = str(command.get("action", ""))
        if run is None or action not in COMMAND_ACTIONS or run.phase not in ("Pending", "Running"):
            continue
        driver._record(driver._job_ref(run), "Normal", "CommandIssued", ISSUED_MESSAGE.format(action=action),
                       component="vc-controller-manager")
        driver._command_action(run, action)
        driver._sync_run(run)
        acted += 1
    return acted
