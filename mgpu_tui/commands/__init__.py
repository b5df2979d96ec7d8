"""One module per command of the command line; each imports what it needs when it runs."""
