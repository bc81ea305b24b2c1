"""The name pgqueue is published under, for every install line a message prints.

``pgqueue`` on the package index is another project (2016); this one is ``pgqueue-sa``, which
installs the ``pgqueue`` import package and the ``pgqueue`` command.
"""

from __future__ import annotations

#: ``[project].name`` in pyproject.toml: ``pip install pgqueue-sa``.
DISTRIBUTION = "pgqueue-sa"


def pip_install(extra: str) -> str:
    """``pip install "pgqueue-sa[extra]"``, the line that installs an optional extra."""
    return f'pip install "{DISTRIBUTION}[{extra}]"'
