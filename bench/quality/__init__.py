"""bench/plan_quality.py's parts, one job each: ``figures`` (a figure, a row, our byte
convention), ``ours`` (our completed plan's bytes), ``textbook`` (the expert's layout, by formula),
``dtensor`` (DTensor's collectives on a fake process group), ``rows`` (the three side by side,
per model). The layouts and conventions are documented in bench/plan_quality.py."""
