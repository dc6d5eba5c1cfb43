"""``python -m repinterp``: the command line (also what ``torchrun -m repinterp`` runs)."""

from .cli import main

main()
