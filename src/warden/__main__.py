"""``python -m warden`` runs the CLI (:mod:`warden.launch`)."""

from warden.launch import main

main()
