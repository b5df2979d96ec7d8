"""The Run view: the view itself (view.py), its form (form.py), its words and bars (text.py) and
the node table of a large job (node_table.py)."""
