"""``python -m repinterp``: the command line (also what ``torchrun -m repinterp`` runs)."""

from .cli.parser import main

main()
