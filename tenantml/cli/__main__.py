"""``python -m tenantml.cli``: the same as the ``tenantml`` command."""

from tenantml.cli.app import main

main()
