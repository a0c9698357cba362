"""``python -m fanout`` is the ``fanout`` command."""

from fanout.cli.main import main

raise SystemExit(main())
