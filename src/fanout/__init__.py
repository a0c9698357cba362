"""fanout: live, personalised views of a large, volatile dataset, delivered through relays.

Installed as the distribution ``fanout-live`` (``fanout`` on the package index is another
project); imported as ``fanout``.
"""

from importlib import metadata

#: The name fanout is installed under (``pip install fanout-live``, pyproject.toml).
DISTRIBUTION = "fanout-live"


def _installed_version() -> str:
    """The installed distribution's version; ``0+unknown`` for a source tree never installed."""
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "0+unknown"


__version__ = _installed_version()
