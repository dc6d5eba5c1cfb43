"""Data: what the engine reads, before any model.

Owns the bundled data sets and image folders with their normalisation (``datasets``), the
``shapes`` benchmark's drawing (``shapes``), reading image files within checked limits
(``image_files``), reference sets and checked image batches in every form the engine accepts
(``reference``), and how a data set was split and fingerprinted (``provenance``). May import
``runtime`` only.
"""
