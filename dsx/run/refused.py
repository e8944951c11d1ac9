"""The one way a run is refused before it starts."""


class RunRefused(ValueError):
    """The run cannot start as asked (bad flags, a config with lint errors, "auto" values, too few GPUs...).
    Nothing was launched and no row is written; the message says what to change."""
