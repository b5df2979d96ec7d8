"""The watch of an unchanged script, inside each of its ranks: the hooks that go in when the script
imports torch (torch_hooks.py), what each counts (script_watch.py), the figures of a
step (step_figures.py) and where its time goes (step_clock.py), its FLOPs (flops/), which
model is the root (model_root.py, wrapping.py), who is a rank in a command's process tree
(process_watch.py) and where the main thread is (stack_signature.py)."""
