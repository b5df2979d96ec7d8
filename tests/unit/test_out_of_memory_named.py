"""Issue 60: an out-of-memory's figures as a rank said them, read as untrusted, and what would fit,
estimated by the rules of engine/run/causes/out_of_memory.py (each under the capacity, labelled)."""

from mgpu_tui.engine.run.causes import out_of_memory

MiB = 1 << 20
PARTS = {"parameters": 10 * MiB, "buffers": 1024, "gradients": 0, "optimizer": 0}


def said(**changes):
    raw = {"kind": "cpu", "phase": "forward", "step": 1, "memory_parts": PARTS, "capacity_bytes": 1700 * MiB,
           "capacity_of": "its address-space limit (RLIMIT_AS)", "request_bytes": 256 * MiB,
           "in_use_bytes": 1500 * MiB, "base_bytes": 700 * MiB}  # fmt: skip
    return {**raw, **changes}


def test_the_smallest_micro_batch_that_fits_by_the_estimate_is_shown_with_its_peak():
    oom = out_of_memory.read(said())
    assert oom is not None and oom.memory_parts == (10 * MiB, 1024, 0, 0)
    # activations: 1500 + 256 - 700 = 1056 MiB, x4 in the forward; still to come: 10 MiB of gradients
    # and 20 of Adam's moments; /4 is 700 + 30 + 1056 = 1786 MiB (over), /8 is 700 + 30 + 528
    (estimate,) = oom.would_fit
    assert estimate.change == "micro-batch / 8, 8 accumulation steps"
    assert estimate.peak_bytes == 700 * MiB + 30 * MiB + 1024 * 2 + 4 * 1056 * MiB // 8 - 1024 * 2
    text = out_of_memory.describe(oom)
    assert text.startswith("torch's CPU allocator ran out of memory in the forward of step 1")
    assert "Would fit (estimates" in text and "about 1.2 GiB" in text


def test_over_several_ranks_zero_and_fsdp_are_estimated_and_only_those_that_fit_shown():
    big = {**PARTS, "buffers": 0, "parameters": 400 * MiB, "gradients": 400 * MiB, "optimizer": 800 * MiB}
    at_step = said(
        phase="optimizer", memory_parts=big, base_bytes=None, in_use_bytes=1650 * MiB, request_bytes=40 * MiB
    )
    oom = out_of_memory.read(at_step, world=4)
    assert oom is not None
    held = 1600 * MiB  # the base: what it held (no address space said); activations 90 MiB
    assert [(e.change, e.peak_bytes) for e in oom.would_fit] == [
        ("micro-batch / 2, 2 accumulation steps", held + 45 * MiB),
        ("ZeRO-1 over 4 ranks", held + 90 * MiB - 600 * MiB),  # the optimizer's state over 4
        ("ZeRO-2 over 4 ranks", held + 90 * MiB - 900 * MiB),  # and the gradients
        ("FSDP over 4 ranks", held + 90 * MiB - 1200 * MiB),  # and the parameters
    ]
    tight = out_of_memory.read({**at_step, "capacity_bytes": 1200 * MiB}, world=4)
    assert tight is not None and [e.change for e in tight.would_fit] == [
        "ZeRO-1 over 4 ranks",
        "ZeRO-2 over 4 ranks",
        "FSDP over 4 ranks",
    ]
    one = out_of_memory.read(said(phase="optimizer", memory_parts=big, base_bytes=None), world=1)
    assert one is not None and not any("over" in e.change for e in one.would_fit)


def test_a_ranks_figures_of_the_wrong_kind_are_none_never_a_traceback():
    assert out_of_memory.read({"kind": "rm -rf"}) is None
    oom = out_of_memory.read(said(memory_parts={"parameters": "many"}, capacity_bytes=True, phase="[red]x",
                                  step=1.5, in_use_bytes=-1))  # fmt: skip
    assert oom is not None and oom.memory_parts is None and oom.capacity_bytes is None
    assert oom.phase is None and oom.step is None and oom.would_fit == ()
    assert "ran out of memory" in out_of_memory.describe(oom)
