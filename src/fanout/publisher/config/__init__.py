"""``fanout.toml``: the publisher's datasets and settings, read and checked.

``settings`` reads the file and its ``[publisher]`` table, ``datasets`` its ``[datasets.NAME]``
tables, ``values`` the typed readers both use, whose every error names the key path at fault.
The reference is ``docs/configuration.md``.
"""

from fanout.publisher.config.settings import (
    PublisherSettings,
    builtin_datasets,
    load_config,
    parse_config,
)

__all__ = ["PublisherSettings", "builtin_datasets", "load_config", "parse_config"]
