"""The `perdure` command."""
