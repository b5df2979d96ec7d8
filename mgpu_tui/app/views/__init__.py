"""The app's screens and views: Dashboard, Topology, Run (with its form), Compare, help, quit."""
