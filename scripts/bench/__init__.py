"""The benchmark's parts; ``scripts/bench.py`` is the entry point users run (see its docstring).

- ``common``: paths, the demo, issue 8's targets;
- ``latency``: candidates and their round-robin timing;
- ``cli``: ``edgepe export`` / ``--help`` in subprocesses;
- ``scale``: large tables exported and verified;
- ``report``: targets, markdown, README section, plot.

The other parts (``scripts/bench_int8.py``, ``bench_pte.py``, ``bench_cortexm.py``,
``bench_lowerings.py``) build on ``latency``.
"""
