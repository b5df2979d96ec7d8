"""Issue 54, where onnx installs (make test-frameworks): a model trained under the watch is exported
to ONNX as it is bare, to the byte (tests/scripts/watch_invisible.py's after_training shape, whose
other ways of making something of the model tests/integration/test_watch_invisible.py compares
everywhere)."""

from conftest import summary_from
from watched_steps import bare_and_watched


def test_a_model_trained_under_the_watch_exports_to_onnx_as_it_does_bare(tmp_path):
    import onnx  # noqa: F401  (make test-frameworks installs it; imported here, make test collects this)

    bare, watched, done, _ = bare_and_watched(tmp_path, "after_training")
    assert watched == bare
    exported = [line for line in bare["out.txt"].decode().splitlines() if " onnx: " in line]
    assert len(exported) == 2 and "not installed" not in "".join(exported), exported
    assert summary_from(done.stdout).compute.tflops > 0
