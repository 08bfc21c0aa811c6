"""profkit.integrations: profkit capture as a callback of the training frameworks.

- :mod:`profkit.integrations.hf`: ``ProfkitCallback`` for ``transformers.Trainer``
- :mod:`profkit.integrations.lightning`: ``ProfkitCallback`` for a Lightning ``Trainer``

Each module imports its framework when it is imported itself; this package imports none.
"""
