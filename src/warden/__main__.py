"""``python -m warden`` runs the CLI."""

from warden.cli import main

main()
