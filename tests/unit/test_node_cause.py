"""Issue 45: in a job over several nodes, the root cause says which node its rank is on ("node 37
(ranks 296-303): rank 301 ..."), in the console's summary; one node's run says it as before."""

from conftest import pinned_summary
from mgpu_tui.engine.nodes.view import NodeView
from mgpu_tui.engine.protocol.causes import RootCause
from mgpu_tui.engine.protocol.heartbeat import NodeState
from mgpu_tui.reports.run_summary import summary_text


def test_the_cause_names_the_node_of_its_rank(tmp_path):
    nodes = tuple(
        NodeView(n, f"gpu-node-{n:03d}", 8 * n, 8 * n + 7, NodeState.RUNNING, 812, 0.5, n == 0)
        for n in range(128)
    )
    cause = RootCause(
        301, None, None, "rank 301 never entered all_reduce(float32[65792]) #8812", "", verdict=True
    )
    text = summary_text(pinned_summary(tmp_path, status="failed", nodes=nodes, root_cause=cause))
    assert "cause: node 37 (ranks 296-303): rank 301 never entered all_reduce(float32[65792]) #8812" in text
    alone = summary_text(pinned_summary(tmp_path, status="failed", root_cause=cause))
    assert "cause: rank 301 never entered" in alone
