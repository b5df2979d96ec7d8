"""Every view, at 80x24 and at 160x50, on a box with 0, 1, 8 and 16 GPUs: snapshots to look at.

The GPUs are the NVML stand-in (tests/nvml_standin.py) of real boxes (the 1-GPU H100 VM and the
8-GPU HGX H100, from their `nvidia-smi topo -m`) and of a 16-GPU NVSwitch box built the same way;
every moving figure (host load, clocks, rates) is pinned, so a snapshot changes only when a view
does. Read them as pictures after a change: `pytest tests/app/test_view_snapshots.py
--snapshot-update`, then open tests/app/__snapshots__/test_view_snapshots/*.svg (the README's
screenshots are copies of two of them).
"""

import dataclasses
import functools
import time
from pathlib import Path

import pynvml as real
import pytest

from conftest import TOPOLOGIES, pinned_comparison, pinned_summary
from mgpu_tui.app import create_app
from mgpu_tui.engine.machine import nvml
from mgpu_tui.engine.machine.host import Host
from mgpu_tui.engine.machine.host_layout import HostLayout, NumaNode
from mgpu_tui.engine.machine.telemetry import HostSample, RankProcess, Sampler
from mgpu_tui.engine.machine.topology import from_nvml, parse_topo_text
from nvml_standin import FakeGpu, FakeMachine, machine_from_topology, standin

SIZES = {"80x24": (80, 24), "160x50": (160, 50)}
VIEWS = {"dashboard": [], "topology": ["t"], "run": ["r"], "compare": ["c"], "runs": ["h"]}
LAYOUT = HostLayout(
    logical_cpus=64,
    physical_cores=32,
    sockets=2,
    nodes=(NumaNode(0, "0-15,32-47", 32, 256 << 30), NumaNode(1, "16-31,48-63", 32, 256 << 30)),
)


def sixteen_gpu_box() -> FakeMachine:
    """16 GPUs on NVSwitch (an HGX-2 class box), two sockets: the biggest single node sold."""
    gpus = [
        FakeGpu(
            name="Tesla V100-SXM3-32GB",
            uuid=f"GPU-{i:08x}-1616-1616-1616-161616161616",
            bus_id=f"00000000:{0x10 + 0x8 * i:02X}:00.0",
            memory_total=32 << 30,
            cpus=list(range(0, 24)) if i < 8 else list(range(24, 48)),
            numa_node=i // 8,
            switch_links=6,
        )
        for i in range(16)
    ]
    return FakeMachine(gpus, {(i, j): "SYS" for i in range(16) for j in range(i + 1, 16)})


def machine(gpus: int) -> FakeMachine:
    if gpus == 2:  # two GPUs of the HGX H100 box
        box = machine(8)
        return FakeMachine(box.gpus[:2], {(0, 1): box.ancestors.get((0, 1), "SYS")})
    if gpus == 0:
        return FakeMachine([], {}, init_error=real.NVML_ERROR_LIBRARY_NOT_FOUND)
    if gpus == 16:
        return sixteen_gpu_box()
    fixture = {1: "h100-1x-vm.txt", 8: "h100-sxm-8x-nvswitch.txt"}[gpus]
    topology = parse_topo_text((TOPOLOGIES / fixture).read_text())
    return machine_from_topology(topology, "NVIDIA H100 80GB HBM3", 80)


@functools.cache
def recorded(gpus: int):
    """(telemetry snapshots, topology, host) of a box with ``gpus`` GPUs, every moving figure pinned
    (frozen values: made once a process, shared by the tests)."""
    box = machine(gpus)
    box.pcie_window_s = 0.0  # the driver's 20 ms PCIe wait matters to timings, not to pictures
    for i, gpu in enumerate(box.gpus):
        gpu.memory_used, gpu.util = (4 + 2 * i) << 30, (10 * (i + 2)) % 101
        gpu.processes = [(1000 + i, (3 + 2 * i) << 30)]
    nvml.use_library(standin(box))
    try:
        sampler = Sampler()  # PCIe rates are read one GPU per sample: enough samples read them all
        snapshots = [sampler.sample() for _ in range(max(gpus, 1) + 1)][-2:]
        topology = from_nvml() if gpus else None
    finally:
        nvml.use_library(None)
    host = HostSample(
        cpu_percent=(35.0,) * 64, memory_used=96 << 30, memory_total=512 << 30, load_avg=(8.0, 7.5, 7.0)
    )
    ranks = tuple(
        RankProcess(r, 2000 + r, True, 99.0, 3 << 30, 12, box.gpus[r].uuid) for r in range(min(gpus, 8))
    )
    pinned = [
        dataclasses.replace(
            snap,
            t=0.0,
            host=host,
            ranks=ranks,
            gpus=tuple(
                dataclasses.replace(
                    g,
                    nvlink_tx_bps=float(20 << 30),
                    nvlink_rx_bps=float(19 << 30),
                    readings=dataclasses.replace(
                        g.readings, sm_clock_mhz=1980, temperature_c=45, power_w=300.0
                    ),
                )
                for g in snap.gpus
            ),
        )
        for snap in snapshots
    ]
    note = f"{gpus} GPU(s), driver 550.54.15" if gpus else "no NVIDIA GPU (no NVIDIA driver library)"
    return pinned, topology, Host(cpu_count=64, gpu_count=gpus, gpu_note=note, torch_available=True)


@pytest.mark.parametrize("gpus", [0, 1, 8, 16])
@pytest.mark.parametrize("size", list(SIZES))
@pytest.mark.parametrize("view", list(VIEWS))
def test_every_view_at_both_sizes_with_0_1_8_and_16_gpus(snap_compare, view, size, gpus):
    snapshots, topology, host = recorded(gpus)
    app = create_app(
        telemetry=snapshots, topology=topology, host=host, host_layout=LAYOUT, run_root=Path("no-runs-here")
    )

    async def settle(pilot):
        await pilot.pause(0.3)  # the Runs view lists in a worker; the others draw at once

    assert snap_compare(
        app, press=VIEWS[view], terminal_size=SIZES[size], run_before=settle if view == "runs" else None
    )


@pytest.mark.parametrize("gpus", [1, 2, 8, 16])
@pytest.mark.parametrize("size", [(80, 24), (160, 50), (250, 70)])
async def test_a_gpu_cards_fields_never_touch_or_run_past_its_width(gpus, size):
    from mgpu_tui.app.widgets.gpu_card import SEP, GpuCard

    snapshots, topology, host = recorded(gpus)
    app = create_app(telemetry=snapshots, topology=topology, host=host, host_layout=LAYOUT)
    async with app.run_test(size=size) as pilot:
        await pilot.pause(0.2)
        cards = list(app.query(GpuCard))
        assert len(cards) == gpus
        for card in cards:
            width = card.content_region.width
            lines = str(card.render()).split("\n")
            assert len(lines) == 3 and all(len(line) <= width for line in lines), (width, lines)
            index = cards.index(card)
            assert lines[0].startswith(f"GPU{index}: {host_name(gpus)}{SEP}45°C{SEP}")  # apart, in order
            assert lines[1].lstrip().startswith("mem [") and f"{SEP}util [" in lines[1]
            assert lines[2].lstrip().startswith("PCIe ") and f"{SEP}NVLink " in lines[2]


def host_name(gpus: int) -> str:
    return "Tesla V100-SXM3-32GB" if gpus == 16 else "NVIDIA H100 80GB HBM3"


@pytest.mark.parametrize("size", list(SIZES))
def test_the_compare_views_results_at_both_sizes(snap_compare, size):
    """Issue #31: side by side, the results table was cut after five columns at 80x24 and the bars
    wrapped; at 160x50 it stopped at "peak" with empty rows below. The table over the charts, each
    as wide as the view, the bars and curves fitted to it; at 80x24 the form folds away for them (f
    brings it back), where they sat under its 14 rows."""
    from mgpu_tui.app.messages import CompareEnded, CompareStarted

    snapshots, topology, host = recorded(0)
    app = create_app(telemetry=snapshots, topology=topology, host=host, run_root=Path("no-runs-here"))

    async def results(pilot):
        await pilot.press("c")
        comparison = pinned_comparison()  # as the app hands its comparison's start and end over
        app.to_views(CompareStarted(comparison))
        app.to_views(CompareEnded(comparison))
        await pilot.pause(0.3)  # the charts are drawn again once the box has its width

    assert snap_compare(app, terminal_size=SIZES[size], run_before=results)


def pinned_run(view, finished: bool, run_dir: str = "runs/20261125T120000Z-ddp") -> None:
    """A 2-rank ddp run of 400 steps shown in the Run view from pinned events (the engine's own
    Aggregator over them): during it (step 240) or after it, drawn the same each time."""
    import math

    from mgpu_tui.engine.launch.spec import LaunchSpec, resolve
    from mgpu_tui.engine.protocol.events import Done, Hello, Step
    from mgpu_tui.engine.run.figures.aggregate import Aggregator
    from mgpu_tui.engine.run.summary_facts import RankMemory

    _, _, host = recorded(0)
    spec = LaunchSpec("ddp", nproc=2, steps=400, device="cpu")
    view.started(spec, resolve(spec, host), run_dir)
    last = 400 if finished else 240
    now = time.time()  # the last step just now: the ranks run, not silent
    events = Aggregator()
    steps, rates, losses = [], [], []
    for rank in (0, 1):
        events.add(Hello(rank, now - 30, rank, 2, 4000 + rank, "h", "cpu", None, "ddp"))
    for step in range(1, last + 1):
        loss = 0.45 + 1.8 * math.exp(-step / 60) + 0.05 * math.sin(step)
        rate = 1900.0 + 120 * math.sin(step / 7)
        steps.append(step)
        rates.append(2 * rate)
        losses.append(loss)
        for rank in (0, 1):
            t = now - (last - step) * 0.034
            events.add(Step(rank, t, step, 32, 0, loss, 32 / rate, 300 << 20, 345 << 20))
    if finished:
        for rank in (0, 1):
            events.add(Done(rank, now, last))
    stats = events.stats()
    view.show(stats, (steps, rates, losses), 30.0)
    logged = [
        (r, "stdout", f"step {s}  loss {losses[s - 1]:.4f}") for s in range(20, last + 1, 20) for r in (0, 1)
    ]
    view.add_log_lines(logged, 0)
    if finished:
        memory = tuple(RankMemory(r, 12 << 20, 12 << 20, 16 << 20, 16 << 20, 345 << 20) for r in (0, 1))
        view.ended(
            pinned_summary(
                Path(run_dir),
                steps=400,
                steps_requested=400,
                samples_per_s=stats.samples_per_s,
                final_loss=stats.final_loss,
                duration_s=14.36,
                peak_mem_bytes=(345 << 20, 345 << 20),
                memory=memory,
            ),
            stats,
        )


@pytest.mark.parametrize("outcome", ["ok", "failed"])
@pytest.mark.parametrize("size", list(SIZES))
async def test_after_a_run_its_logs_keep_at_least_five_lines_at_both_sizes(size, outcome):
    """Issue #43: once a run ended, the result panel took the Run view's room at 80x24 and the logs
    had no row left (a failing rank's traceback could not be read). After a run, ok or failed, the
    log pane shows five lines or more, at 80x24 and at 160x50."""
    from mgpu_tui.app.views.run.view import RunView
    from mgpu_tui.app.widgets.log_view import LogPane
    from mgpu_tui.engine.run.causes.rootcause import RootCause

    snapshots, topology, host = recorded(0)
    app = create_app(telemetry=snapshots, topology=topology, host=host, run_root=Path("no-runs-here"))
    async with app.run_test(size=SIZES[size]) as pilot:
        await pilot.press("r")
        view = app.query_one(RunView)
        pinned_run(view, finished=outcome == "ok")
        if outcome == "failed":
            cause = RootCause(1, 240, None, "RuntimeError: boom", "Traceback (most recent call last):\n" * 20)
            view.ended(pinned_summary(Path("runs/x"), status="failed", exit_code=1, root_cause=cause), None)
        await pilot.pause(0.3)
        pane = app.query_one(LogPane)
        assert pane.content_region.height >= 5, (size, pane.region)


@pytest.mark.parametrize("phase", ["during", "after"])
@pytest.mark.parametrize("size", list(SIZES))
def test_the_run_view_during_and_after_a_run_at_both_sizes(snap_compare, size, phase):
    """Issue #31: at 80x24 the charts had 20 columns and the result panel was cut after two lines.
    The ranks, the charts under them (at 80 columns) or beside them, the status line with the stop
    key while it goes, and the result panel whole once it ended."""
    from mgpu_tui.app.views.run.view import RunView

    snapshots, topology, host = recorded(0)
    app = create_app(telemetry=snapshots, topology=topology, host=host, run_root=Path("no-runs-here"))

    async def run(pilot):
        await pilot.press("r")
        pinned_run(app.query_one(RunView), finished=phase == "after")
        await pilot.pause(0.3)

    assert snap_compare(app, terminal_size=SIZES[size], run_before=run)


HANG_SIZES = {"80x24": (80, 24), "160x45": (160, 45)}


@pytest.mark.parametrize("phase", ["live", "stopped", "failed"])
@pytest.mark.parametrize("size", list(HANG_SIZES))
def test_a_hang_on_screen_live_after_s_and_stopped_by_the_stall_watch(snap_compare, size, phase):
    """Issue 56: a hang's verdict where the slow ranks' remark was (live); first in the result after
    s, the hung ranks `stalled`; and the stall's root cause with the ranks' stacks when --on-stall
    stop ended the run. At 160x45 (a short view: 41 rows) the panel had 3 lines over a 25-row log
    box holding 4: it has 40% of the view now; at 80x24 it keeps 5 rows, the hang its first line,
    the logs their 5."""
    from mgpu_tui.app.views.run.view import RunView
    from mgpu_tui.engine.run.causes.watchdog import Stall, StalledRank

    verdict = (
        "rank 1 never entered all_reduce(float32[1, 8]) #42 (default group); rank 0 has waited in it "
        "for 16 s; rank 1 is in train at ddp.py:47"
    )
    stall = Stall(15.0, (StalledRank(0, 240, 16.0), StalledRank(1, 240, 16.0)), "/nowhere", verdict, 1)
    snapshots, topology, host = recorded(0)
    app = create_app(telemetry=snapshots, topology=topology, host=host, run_root=Path("no-runs-here"))

    async def run(pilot):
        await pilot.press("r")
        view = app.query_one(RunView)
        pinned_run(view, finished=False)
        stats = view.rank_table.shown
        view.stall_after = 0.0  # the ranks are silent past the stall timeout: stalled, as the watch said
        view.show(stats, ([], [], []), 0.0, stalled=frozenset({0, 1}), stall=stall)
        if phase != "live":
            cause = stall.root_cause() if phase == "failed" else None
            if cause is not None:  # its stacks, as the ranks' reporters wrote them
                stacks = "\n".join(
                    f'--- rank {r} ---\nThread 0x1 (most recent call first):\n  File "ddp.py", '
                    f'line {47 if r else 52} in train\n  File "ddp.py", line 70 in main'
                    for r in (1, 0)
                )
                cause = dataclasses.replace(cause, traceback=stacks)
            view.ended(
                pinned_summary(
                    Path("runs/20261125T120000Z-ddp"),
                    status="failed" if cause else "interrupted",
                    steps=240,
                    steps_requested=400,
                    stall=stall,
                    root_cause=cause,
                    ranks=tuple(
                        dataclasses.replace(r, last_step=240, done=not cause)  # what a stopped rank may say
                        for r in pinned_summary(Path("x")).ranks
                    ),
                ),
                stats,
            )
        await pilot.pause(0.3)

    assert snap_compare(app, terminal_size=HANG_SIZES[size], run_before=run)
