"""The one error type a user can fix (no heavy import, so the CLI can catch it before any verb loads)."""


class SpecReproError(Exception):
    """An error with a one-line, user-facing message (no traceback needed)."""
