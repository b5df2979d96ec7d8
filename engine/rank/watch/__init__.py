"""The watch of an unchanged script, inside each of its ranks: the hooks that go in when the script
imports torch (torch_hooks.py), what each counts (script_watch.py), the figures of a
step (step_figures.py) and where its time goes (step_clock.py), its FLOPs (flops/), which
model is the root (model_root.py, wrapping.py), who is a rank or a trainer in a command's process
tree and where each training ends (process_watch.py), and where the training thread is
(stack_signature.py)."""
