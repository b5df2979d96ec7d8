"""The commands that take a launch line of the user's own: ``torchrun`` (torchrun's command line,
read by torchrun's parser, then run as ``run --script`` runs it), ``exec`` (any command line, run as
given: its own launcher starts the ranks) and ``slurm`` (an sbatch script whose nodes each run
``mgpu-tui run``)."""
