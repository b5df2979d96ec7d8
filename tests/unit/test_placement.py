"""Rank-to-device maps for every mode, as pure functions: 1, 2, 4 and 8 GPUs, and too few."""

import pytest

from mgpu_tui.engine.planning.modes import MODES
from mgpu_tui.engine.planning.placement import PlacementError, rank_devices, shares_gpus, split_layers


def devices(mode: str, *args, **kwargs) -> list[str]:
    """A rank's devices for a mode of the catalogue (placement itself knows layouts, not modes)."""
    return rank_devices(MODES[mode].layout, *args, **kwargs)


@pytest.mark.parametrize("gpus", [1, 2, 4, 8])
@pytest.mark.parametrize("mode", ["ddp", "pipeline", "fsdp", "rpc", "tp"])
def test_one_gpu_per_rank_modes_use_the_local_rank(mode, gpus):
    maps = [devices(mode, r, gpus, nproc=gpus) for r in range(gpus)]
    assert maps == [[f"cuda:{r}"] for r in range(gpus)]


@pytest.mark.parametrize("gpus", [2, 4, 8])
def test_ddp_mp_rank_spans_two_neighbouring_gpus(gpus):
    nproc = gpus // 2
    maps = [devices("ddp_mp", r, gpus, nproc=nproc) for r in range(nproc)]
    assert maps == [[f"cuda:{2 * r}", f"cuda:{2 * r + 1}"] for r in range(nproc)]
    assert sorted(d for m in maps for d in m) == sorted(f"cuda:{i}" for i in range(gpus))


@pytest.mark.parametrize("gpus", [1, 2, 4, 8])
def test_dp_uses_every_visible_gpu_and_hybrid_the_cpu_then_gpu0(gpus):
    assert devices("dp", 0, gpus) == [f"cuda:{i}" for i in range(gpus)]
    assert devices("hybrid", 0, gpus) == ["cpu", "cuda:0"]
    assert devices("single", 0, gpus) == ["cuda:0"]


@pytest.mark.parametrize("gpus, stages", [(2, 2), (4, 4), (8, 3)])
def test_mp_puts_stage_s_on_gpu_s(gpus, stages):
    assert devices("mp", 0, gpus, stages=stages) == [f"cuda:{s}" for s in range(stages)]


@pytest.mark.parametrize(
    "mode, gpus, nproc, stages",
    [
        ("ddp", 1, 2, 2),
        ("ddp", 4, 8, 2),
        ("ddp_mp", 3, 2, 2),
        ("ddp_mp", 1, 1, 2),
        ("mp", 2, 1, 4),
        ("dp", 0, 1, 2),
        ("hybrid", 0, 1, 2),
        ("tp", 2, 4, 2),
    ],
)
def test_too_few_gpus_is_one_clear_sentence(mode, gpus, nproc, stages):
    with pytest.raises(PlacementError) as info:
        devices(mode, 0, gpus, nproc=nproc, stages=stages)
    needed = max(MODES[mode].gpus_needed(nproc, stages), 1)
    assert f"needs {needed} GPU(s), but {gpus} are visible" in str(info.value)


def test_cpu_keeps_the_structure_on_the_host():
    assert devices("ddp_mp", 1, 0, nproc=2, device="cpu") == ["cpu", "cpu"]
    assert devices("mp", 0, 0, stages=3, device="cpu") == ["cpu"] * 3
    assert devices("hybrid", 0, 0, device="cpu") == ["cpu", "cpu"]


@pytest.mark.parametrize("n, parts, sizes", [(5, 2, [3, 2]), (5, 5, [1] * 5), (8, 3, [3, 3, 2]), (4, 1, [4])])
def test_layers_split_into_contiguous_balanced_runs(n, parts, sizes):
    ranges = split_layers(n, parts)
    assert [len(r) for r in ranges] == sizes
    assert [i for r in ranges for i in r] == list(range(n))


def test_more_stages_than_layers_is_refused():
    with pytest.raises(PlacementError):
        split_layers(3, 4)


@pytest.mark.parametrize(
    "mode, gpus, nproc, expected",
    [
        ("ddp", 1, 2, [["cuda:0"], ["cuda:0"]]),
        ("ddp", 2, 4, [["cuda:0"], ["cuda:1"], ["cuda:0"], ["cuda:1"]]),
        ("ddp_mp", 1, 2, [["cuda:0", "cuda:0"], ["cuda:0", "cuda:0"]]),
        ("ddp_mp", 2, 2, [["cuda:0", "cuda:1"], ["cuda:0", "cuda:1"]]),
        ("rpc", 1, 3, [["cuda:0"]] * 3),
        ("ddp", 4, 2, [["cuda:0"], ["cuda:1"]]),
    ],  # enough GPUs: sharing changes nothing
)
def test_shared_gpus_are_taken_round_robin(mode, gpus, nproc, expected):
    maps = [devices(mode, r, gpus, nproc=nproc, share=True) for r in range(nproc)]
    assert maps == expected
    assert shares_gpus(MODES[mode].layout, nproc, gpus) == (MODES[mode].gpus_needed(nproc) > gpus)


def test_shared_stages_and_the_cpu_part_of_hybrid():
    assert devices("mp", 0, 1, stages=3, share=True) == ["cuda:0"] * 3
    assert devices("hybrid", 0, 1, share=True) == ["cpu", "cuda:0"]
    assert devices("ddp", 1, 0, nproc=2, device="cpu", share=True) == ["cpu"]
    with pytest.raises(PlacementError):  # sharing needs one GPU at least
        devices("ddp", 0, 0, nproc=2, share=True)
