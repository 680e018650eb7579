"""How the informer decodes watch lines: without `managedFields` (cut out before decoding), and with the
cyclic collector paused from a streaming list's first event to its end bookmark."""

from __future__ import annotations

import gc
import weakref
from typing import Any

import orjson
import pytest
from kubernetes import client

from tests.recorded import RECORDED
from tests.simtools import pod, wait_for
from volcano_monitor.core.backoff import Backoff
from volcano_monitor.core.kube.informer import Informer
from volcano_monitor.core.kube.resources import PODS
from volcano_monitor.core.kube.watchline import decode_event, without_managed_fields
from volcano_monitor.simulator import resources as sim_types
from volcano_monitor.simulator.runtime import SimulatorThread


def stripped(line: bytes) -> Any:
    """The full decode of `line`, then its object's managedFields removed: what the cut must give."""
    event = orjson.loads(line)
    event["object"]["metadata"].pop("managedFields", None)
    return event


def test_every_recorded_line_is_cut_exactly() -> None:
    """Real API server output (core kinds in Go struct order, CRDs with sorted keys): every line with
    managedFields is cut, and the cut decodes to exactly the object without them."""
    cut = 0
    for path in sorted(RECORDED.glob("*.jsonl")):
        for line in path.read_bytes().splitlines():
            if b'"managedFields"' not in line:
                continue
            shorter = without_managed_fields(line)
            assert shorter is not line and len(shorter) < len(line), path.name
            assert orjson.loads(shorter) == stripped(line), path.name
            assert decode_event(line, True) == stripped(line)
            cut += 1
    assert cut > 1000  # every kind of the five watches, thousands of lines


@pytest.mark.parametrize("line, expected_cut", [
    # A key inside FieldsV1 holding `],"` escaped: not a cut point; managedFields not last in metadata.
    (b'{"type":"ADDED","object":{"metadata":{"generation":1,"managedFields":[{"manager":"m","fieldsV1":{"f:spec":'
     b'{"k:{\\"name\\":\\"a],\\\\\\"b]},\\\\\\"c\\"}":{}}}}],"name":"p","uid":"u"},"spec":{"x":[1]}}}', True),
    # managedFields last in metadata, metadata last in the object: no `],"` / `]},"` right after it, the
    # first one found lies beyond and the cut cannot decode: the whole line is decoded instead.
    (b'{"object":{"kind":"Pod","metadata":{"name":"p","managedFields":[{"manager":"m"}]}},"type":"ADDED",'
     b'"extra":[1],"more":2}', False),
    # A string value that mentions the member: quotes in a string are escaped, so no match there.
    (b'{"type":"ADDED","object":{"metadata":{"name":"p","annotations":{"a":"\\",\\"managedFields\\":['
     b'x]},\\""}},"spec":{"l":[2]}}}', False),
])
def test_a_cut_is_exact_or_the_whole_line_is_decoded(line: bytes, expected_cut: bool) -> None:
    full = orjson.loads(line)
    decoded = decode_event(line, True)
    assert decoded == (stripped(line) if expected_cut else full)
    assert decode_event(line, False) == full


def test_an_undecodable_line_still_raises() -> None:
    with pytest.raises(orjson.JSONDecodeError):
        decode_event(b'{"type":"ADDED","object":{"metadata":{"name":"p","managedFields":[{]},"spec":{}', True)


def managed_pod(name: str) -> dict[str, Any]:
    made = pod(name)
    made["metadata"]["managedFields"] = [{"manager": "kubelet", "operation": "Update", "fieldsType": "FieldsV1",
                                          "fieldsV1": {"f:status": {"f:phase": {}}}, "subresource": "status"}]
    return made


def test_the_collector_is_paused_for_a_streaming_list_only(sim: SimulatorThread, api: client.ApiClient,
                                                           informers: list[Informer[Any]]) -> None:
    sim.call(lambda: [sim.store.create(sim_types.PODS, managed_pod(f"p{i}"), "default") for i in range(20)])
    assert "managedFields" in sim.call(sim.store.get, sim_types.PODS, "default", "p0")["metadata"]
    enabled: list[bool] = []
    informer: Informer[dict[str, Any]] = Informer(api, PODS, backoff=Backoff(0.02, 0.2))
    informer.add_handler(lambda event_type, obj: enabled.append(gc.isenabled()))
    gc.unfreeze()
    informers.append(informer.start())
    assert informer.wait_synced(10)
    assert enabled == [False] * 20 and gc.isenabled()
    assert gc.get_freeze_count() > 0  # what the complete list left is frozen, not rescanned
    assert "managedFields" not in informer.cache["default/p0"].obj["metadata"]
    sim.call(sim.store.create, sim_types.PODS, pod("late"), "default")  # the watch after it: collector on
    wait_for(lambda: len(enabled) == 21)
    assert enabled[-1] is True


class _Cycle:
    def __init__(self) -> None:
        self.me = self


def test_cyclic_garbage_made_during_the_pause_is_collected_not_frozen(
        sim: SimulatorThread, api: client.ApiClient, informers: list[Informer[Any]]) -> None:
    """Another thread's cycles left while the collector was off must not become permanent."""
    sim.call(lambda: [sim.store.create(sim_types.PODS, pod(f"p{i}"), "default") for i in range(5)])
    dropped: list[weakref.ref[_Cycle]] = []
    informer: Informer[dict[str, Any]] = Informer(api, PODS, backoff=Backoff(0.02, 0.2))
    informer.add_handler(lambda event_type, obj: dropped.append(weakref.ref(_Cycle())))
    gc.unfreeze()
    informers.append(informer.start())
    assert informer.wait_synced(10) and len(dropped) == 5
    assert gc.get_freeze_count() > 0
    gc.collect()  # frozen objects are out of its reach: a cycle frozen would still be alive here
    assert all(ref() is None for ref in dropped)


def test_a_stream_cut_before_its_bookmark_resumes_the_collector(sim: SimulatorThread, api: client.ApiClient,
                                                               informers: list[Informer[Any]]) -> None:
    sim.call(lambda: [sim.store.create(sim_types.PODS, pod(f"p{i}"), "default") for i in range(20)])
    sim.api.faults.truncate_streams = 1  # half the initial events, then the connection drops
    informer: Informer[dict[str, Any]] = Informer(api, PODS, backoff=Backoff(0.02, 0.2))
    informers.append(informer.start())
    assert informer.wait_synced(10) and len(informer.cache) == 20
    assert gc.isenabled()
