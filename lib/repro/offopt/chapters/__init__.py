"""The offline-optimisation chapters' drivers, one module per chapter.

root
    ROOT: a Brownian bridge trained on GP-generated low/high design pairs.
sensitivity
    BOSS: the surrogate-sensitivity regulariser against vanilla optimisers.
ignite
    IGNITE: the sharpness regulariser against vanilla optimisers.

Each driver holds its chapter's typed settings (extending
:class:`repro.offopt.grid.GridSettings`), ``run`` and ``claims`` and the
figures only that chapter draws; no driver imports another.
"""
