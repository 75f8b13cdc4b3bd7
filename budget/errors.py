"""The one exception base of the planner; the CLI maps it to exit 2."""


class BudgetError(ValueError):
    """Bad input: an unknown profile, a malformed config, an impossible setting.

    The message is one line that names what was wrong and what is allowed.
    """
