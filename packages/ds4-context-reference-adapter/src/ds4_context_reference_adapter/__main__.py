"""``python -m ds4_context_reference_adapter``: the ``ds4-context-reference`` command."""

from .cli import main

raise SystemExit(main())
