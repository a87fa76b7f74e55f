"""``python -m ds4_context_engine``: the same as the ``ds4-context`` command."""

from .cli import main

if __name__ == "__main__":
    main()
