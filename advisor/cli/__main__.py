"""``python -m advisor.cli`` runs the CLI."""

from advisor.cli import main

main()
