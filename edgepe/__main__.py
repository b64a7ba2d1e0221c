"""``python -m edgepe``: the same as the ``edgepe`` console script."""

from edgepe.cli import main

main()
