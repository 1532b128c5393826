"""What a person is shown of a job (describe, goodput account, events, errors): the CLI and
the API both call it, and neither imports the other."""
