"""ReproBook's shared library.

Subpackages hold the algorithms of each family of chapters (``repro.federated``,
``repro.collectives``, ...); the modules beside them are the pieces every
chapter shares: the chapter registry, parameter schemas, the results ledger,
the runner, datasets, partitioners and models.
"""

__version__ = "0.1.0"
