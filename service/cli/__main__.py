"""`python -m engram.service.cli`: the `engram` command."""

from . import main

main()
