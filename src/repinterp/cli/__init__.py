"""The ``repinterp`` command: the parser and its one-line errors (``parser``), what each
subcommand does (``commands``) and the options of ``repinterp evaluate`` (``evaluate``). It may
import everything; nothing imports it. torch is imported by the commands when they run, so that
``--help`` answers at once.
"""

from .parser import main

__all__ = ["main"]
