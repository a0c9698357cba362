"""``python -m fanout`` is the ``fanout`` command."""

from fanout.cli import main

raise SystemExit(main())
