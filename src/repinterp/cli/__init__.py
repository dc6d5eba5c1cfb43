"""The ``repinterp`` command: the parser and its one-line errors (``parser``), the options
several subcommands share (``options``), what they read (``inputs``), and one module per
subcommand, its flags beside what it does (``train``, ``fit``, ``explain``, ``report``,
``audit``, ``demo``, ``serve``, ``evaluate``). It may
import everything; nothing imports it. torch is imported by the commands when they run, so that
``--help`` answers at once.
"""

from .parser import main

__all__ = ["main"]
