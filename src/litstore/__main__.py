"""``python -m litstore``: the command line (see :mod:`litstore.cli`)."""

from litstore.cli import main

main()
