"""Store: what the method writes to disk and reads back.

Owns crash-safe file writes (``files``), the index folder format with its checksums
(``index_folder``), what an index records of its model and the checks that it is opened with
that model (``index_model``), the streaming build of an index in one pass over the reference
set, also under ``torchrun`` (``index_build``), resumable shards (``shards``), the k-means
regions kept with an index (``regions_file``) and the rule of where a command may write
(``outputs``). May import ``runtime``, ``data``, ``models`` and ``core``.
"""
