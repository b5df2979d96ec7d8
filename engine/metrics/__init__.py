"""Prometheus metrics of a run, served by its monitor (``--metrics-port``): a frozen snapshot of the
run taken by the thread that polls it (snapshot.py), the metric families a scrape makes of it
(families.py: every metric declared once), and the endpoint (server.py). Above records/: it reads
a run this process started and one followed from its folder alike."""
