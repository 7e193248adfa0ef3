"""`python -m app.cli`: the same as the `onloop` console script."""

from app.cli.main import main

main()
