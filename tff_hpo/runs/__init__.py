"""A run on disk: its directory, lock, status, typed checkpoints and their migrations, stateful clients' files."""
