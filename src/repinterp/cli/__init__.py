"""The ``repinterp`` command: the parser and its one-line errors (``parser``), the options
several subcommands share (``options``), what each subcommand does with its flags beside it
(``commands``; ``evaluate`` and ``audit`` in modules of their own). It may
import everything; nothing imports it. torch is imported by the commands when they run, so that
``--help`` answers at once.
"""

from .parser import main

__all__ = ["main"]
