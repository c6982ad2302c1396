"""`lirs` subcommands. Each module defines ``add_parser(subparsers)`` and ``run(args) -> int``.

The CLI discovers every module in this package, so a new subcommand is a new file here.
"""
