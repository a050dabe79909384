"""The redundancy filters: one module or folder per family, each declaring its `FILTER` (or `FILTERS`).

A family whose build needs a Beam stage of its own is a folder: `decision.py`
(pure: the decision and the registry entries) and `stage.py` (its Beam
stage, `STAGE`); the others are one module whose build runs the generic
stage of their strategy (see `transforms.dedup.registry`).
"""
