"""A job over several nodes: the rendezvous endpoint checked before anything waits on it
(endpoint.py), and each node's watch over the others through the rendezvous store (watch.py,
with its link process in rank/node_link.py)."""
