"""What a script's summary says of what its ranks used (engine/run/summary.py), from their events."""

from mgpu_tui.engine.protocol.events import About, Done, Hello, Step
from mgpu_tui.engine.run.figures.aggregate import Aggregator
from mgpu_tui.engine.run.summary_facts import shared_device_note


def ranks_on(*devices: str):
    agg = Aggregator()
    for rank, device in enumerate(devices):
        agg.add(Hello(rank, 1.0, rank, len(devices), 100 + rank, "h", "unknown", None, "script"))
        agg.add(Step(rank, 2.0, 1, 8, 0, 1.0, 0.1, 1, 1))
        agg.add(
            About(
                rank, 2.0, device, f"GPU-{device}", "gloo", 8, "the batches entering DistributedDataParallel"
            )
        )
        agg.add(Done(rank, 3.0, 1, {"process_group": "destroyed"}))
    return agg.stats()


def test_every_rank_on_one_gpu_is_named_with_the_line_that_fixes_it():
    note = shared_device_note(ranks_on("cuda:0", "cuda:0", "cuda:0"))
    assert (
        note.startswith("every rank trained on cuda:0")
        and 'set_device(int(os.environ["LOCAL_RANK"]))' in note
    )
    assert shared_device_note(ranks_on("cuda:0", "cuda:1")) is None
    assert shared_device_note(ranks_on("cpu", "cpu")) is None  # CPU ranks share the host by design
    assert shared_device_note(ranks_on("cuda:0", "cuda:1", "cuda:1")).startswith(
        "ranks 1, 2 trained on cuda:1"
    )


def test_what_the_ranks_said_they_used_reaches_their_stats():
    (r0, r1) = ranks_on("cuda:0", "cuda:1").ranks
    assert (r0.device, r0.backend, r0.batch, r0.process_group) == ("cuda:0", "gloo", 8, "destroyed")
    assert r1.device_uuid == "GPU-cuda:1"
