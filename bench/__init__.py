"""pgqueue's benchmark: every figure beside the raw-SQL limit measured in the same run.

Run ``python -m bench --help``. See ``docs/benchmarks.md``.
"""
