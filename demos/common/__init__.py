"""What the demos share, so that each mode's script shows only its mode: the harness (arguments,
devices, precision, the training loop's parts), the models and their data (model.py, the GPT in
transformer.py), what a demo reports (reporting.py), failures on purpose (faults.py) and --verify's
comparison with the baseline (verify.py)."""
