"""Layer 3, the model: the Graph IR, the ops as Python functions, shape and dtype inference,
annotations (``shard``), the JSON exchange format and the example models.
"""
