"""The wrappers mgpu-tui puts around torch's APIs inside a script's ranks (engine/rank/watch/wrapping.py):
every argument passes through exactly as called, positional or keyword, under any name (Lightning
calls ``DistributedDataParallel(module=...)``; a wrapper whose own first parameter was named
``module`` made that "got multiple values for argument 'module'"); the wrapped signature is kept;
and mgpu-tui's part, should it fail, never becomes the caller's exception."""

import inspect

import pytest

from mgpu_tui.engine.rank.watch.wrapping import around as _around
from mgpu_tui.engine.rank.watch.wrapping import backend_for as _backend_for


class Wrapped:
    def __init__(self, module, process_group=None, *, device_ids=None):
        self.got = (module, process_group, device_ids)


def test_a_wrapped_init_takes_its_arguments_by_keyword_positionally_and_from_a_subclass():
    seen = []
    original = Wrapped.__init__
    Wrapped.__init__ = _around(original, after=lambda args, kwargs, out: seen.append(args[0]))
    try:

        class Sub(Wrapped):
            def __init__(self, model):
                super().__init__(module=model)

        assert Wrapped(module="m", device_ids=[0]).got == ("m", None, [0])
        assert Wrapped("m", "pg").got == ("m", "pg", None)
        assert Sub("m").got == ("m", None, None)
        assert len(seen) == 3 and isinstance(seen[-1], Sub)  # the instance, however it was called
        with pytest.raises(TypeError, match="multiple values for argument 'module'"):
            Wrapped("m", module="again")  # the caller's own mistake is torch's error, as bare
    finally:
        Wrapped.__init__ = original


def test_a_wrapper_keeps_the_signature_name_and_result():
    def fully_shard(module, *, mesh=None):
        """torch's doc."""
        return [module, mesh]

    watched = _around(fully_shard, after=lambda args, kwargs, out: None)
    assert inspect.signature(watched) == inspect.signature(fully_shard)
    assert (watched.__name__, watched.__doc__) == ("fully_shard", "torch's doc.")
    assert watched(module="m", mesh="x") == ["m", "x"]


def test_a_failure_of_mgpu_tuis_part_never_reaches_the_caller():
    def boom(*args):
        raise RuntimeError("mgpu-tui's own mistake")

    def step(optimizer):
        return f"stepped {optimizer}"

    watched = _around(step, before=boom, after=boom)
    assert watched(optimizer="sgd") == "stepped sgd"


def test_the_callers_own_exception_passes_through_unchanged():
    def init(backend=None):
        raise ValueError("the user's mistake")

    with pytest.raises(ValueError, match="the user's mistake"):
        _around(init, after=lambda *a: None)(backend="nccl")


def test_a_group_made_without_a_backend_names_the_one_its_device_uses():
    assert _backend_for("cpu:gloo,cuda:nccl", "cpu") == "gloo"
    assert _backend_for("cpu:gloo,cuda:nccl", "cuda:3") == "nccl"
    assert _backend_for("cpu:gloo,cuda:nccl", "unknown") == "cpu:gloo,cuda:nccl"
    assert _backend_for("nccl", "cuda:0") == "nccl" and _backend_for(None, "cpu") is None
