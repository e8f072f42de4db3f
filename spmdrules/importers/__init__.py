"""Importers: the models people already have, as spmdrules Graphs.

Each importer is an optional extra and imports its framework only when called, so the core keeps
its own dependencies: ``spmdrules.importers.torch`` (``pip install -e '.[torch]'`` in a clone, via
``torch.export``). An importer maps every op of the model onto registered ops or raises a typed
error naming the node (``spmdrules.importers.errors``); it never drops or approximates an op.
"""
