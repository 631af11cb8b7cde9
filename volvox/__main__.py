"""``python -m volvox`` is the ``volvox`` command."""

from volvox.cli import main

raise SystemExit(main())
