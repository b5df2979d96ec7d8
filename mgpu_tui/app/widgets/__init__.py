"""Widgets the views are made of: bars and charts as text, the log pane, a GPU card, a status line."""
