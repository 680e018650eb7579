"""The arithmetic of GPU usage on shared cards (watchdog.sources.shared_gpus) on its own: hand-computed splits,
and the inputs that must not break it (readings over 100, shares of 0 or negative, series naming no card,
containers that used more than their share, pods the caches do not know)."""

from __future__ import annotations

import pytest

from volcano_monitor.watchdog.sources.shared_gpus import GpuUse, ShareLookup, from_dcgm, from_hami, of_share

NS = "ml"


def _shares(table: dict[str, float]) -> ShareLookup:
    return lambda namespace, pod: table.get(pod) if namespace == NS else None


def test_unequal_shares_split_the_card_in_proportion() -> None:
    # a card at 90 %: a holds 0.5, b 0.25 (a quarter nobody holds): 0.6 and 0.3 GPUs, 120 % of each share -> capped
    uses = from_dcgm({(NS, "a", "main", "GPU-1"): 90.0, (NS, "b", "main", "GPU-1"): 90.0},
                     _shares({"a": 0.5, "b": 0.25}))
    assert uses[(NS, "a", "main")] == GpuUse(100.0, pytest.approx(0.6), True)
    assert uses[(NS, "b", "main")] == GpuUse(100.0, pytest.approx(0.3), True)


def test_a_pod_on_two_shared_cards_and_a_whole_card_pod() -> None:
    cards = {(NS, "p", "main", "GPU-1"): 40.0, (NS, "p", "main", "GPU-2"): 0.0,
             (NS, "q", "main", "GPU-1"): 40.0, (NS, "w", "main", "GPU-3"): 70.0}
    uses = from_dcgm(cards, _shares({"p": 1.0, "q": 0.5, "w": 1.0}))
    # p holds half of GPU-1 and half of GPU-2: 0.4 x 0.5/1.0 + 0 = 0.2 of its 1.0
    assert uses[(NS, "p", "main")].used == pytest.approx(0.2) and uses[(NS, "p", "main")].gpus == 1.0
    assert uses[(NS, "q", "main")].used == pytest.approx(0.2) and uses[(NS, "q", "main")].gpus == 0.5
    assert uses[(NS, "w", "main")] == GpuUse(70.0, 1.0, False)  # a whole card: the plain reading


def test_bad_inputs_are_bounded() -> None:
    # over 100 reads 100; a series naming no card is its own card; a known pod with a share of 0 or below (a
    # GPU resource not counted as cards) reads whole; a pod the caches do not know is left out of the split
    uses = from_dcgm({(NS, "a", "main", ""): 250.0, (NS, "b", "main", "GPU-1"): 50.0,
                      (NS, "ghost", "main", "GPU-1"): 50.0},
                     _shares({"a": 0.0, "b": -1.0}))
    assert uses == {(NS, "a", "main"): GpuUse(100.0, 1.0), (NS, "b", "main"): GpuUse(50.0, 1.0)}
    uses = from_dcgm({(NS, "a", "main", ""): 30.0, (NS, "ghost", "main", ""): 30.0}, None)
    assert uses == {(NS, "a", "main"): GpuUse(30.0, 1.0), (NS, "ghost", "main"): GpuUse(30.0, 1.0)}
    hami = from_hami({(NS, "h", "main", "GPU-1"): 180.0}, _shares({"h": 0.25}))
    assert hami == {(NS, "h", "main"): GpuUse(100.0, 1.0, True)}  # 100 % of a card, more than its quarter


def test_hami_splits_the_pod_share_over_its_containers_by_vgpu_count() -> None:
    devices = {(NS, "p", "a", "GPU-1"): 10.0, (NS, "p", "a", "GPU-2"): 10.0, (NS, "p", "b", "GPU-3"): 15.0}
    uses = from_hami(devices, _shares({"p": 0.75}))
    # a: 2 of 3 vGPUs -> 0.5 of the 0.75, used 0.2 (40 %); b: 0.25, used 0.15 (60 %)
    assert uses[(NS, "p", "a")].gpus == pytest.approx(0.5) and uses[(NS, "p", "a")].util_percent == pytest.approx(40)
    assert uses[(NS, "p", "b")].gpus == pytest.approx(0.25) and uses[(NS, "p", "b")].util_percent == pytest.approx(60)


def test_of_share() -> None:
    assert of_share(0.1, 0.25) == GpuUse(pytest.approx(40.0), 0.25, True)
    assert of_share(0.5, 0.25) == GpuUse(100.0, 0.5, True)
    assert of_share(-1.0, 0.25) == GpuUse(0.0, 0.25, True)
