"""Optional back-ends (the ``smt`` and ``ray`` extras), imported on use.

A module that uses an extra imports it through :func:`require`, never at its top, so that every
module of the packages imports on a base install. A missing extra raises
:class:`MissingExtraError`: one line that names what needed it and the command that installs it.
The scripts print that line and exit with status 2.
"""

from __future__ import annotations

import importlib
from types import ModuleType

# import name -> (the pip distribution, the extra of recourse-gym that installs it)
EXTRAS: dict[str, tuple[str, str]] = {
    "z3": ("z3-solver", "smt"),
    "ray": ("ray", "ray"),
}


class MissingExtraError(ImportError):
    """An optional package is not installed; the message says which extra installs it."""


def require(module: str, what: str) -> ModuleType:
    """Import ``module`` (a key of :data:`EXTRAS`) for ``what`` (e.g. "backend: 'z3'"), or raise
    :class:`MissingExtraError` naming the extra to install."""
    try:
        return importlib.import_module(module)
    except ImportError as err:
        dist, extra = EXTRAS[module]
        raise MissingExtraError(f"{what} needs {dist}, which is not installed: "
                                f"pip install -e '.[{extra}]' (or pip install 'recourse-gym[{extra}]')") from err
