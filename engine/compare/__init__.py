"""``compare`` and ``scale``: several runs of one template, reduced to rows."""
