"""``python -m volvox`` is the ``volvox`` command."""

from .cli import main

raise SystemExit(main())
