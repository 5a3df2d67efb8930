"""Errors a user can cause and fix. The CLIs print them as one line and exit 2."""


class UserError(ValueError):
    """Bad configuration or input: reported as one readable line, never a traceback."""
