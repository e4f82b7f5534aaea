"""The one exception type for mistakes a user can fix; `bertkit.cli.app` turns it into a message and exit code 2."""


class UserError(Exception):
    """A problem with the user's input or environment, phrased as: what is wrong, what is valid, the fix."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


def raise_if_problems(problems: list[str], what: str = "Invalid options") -> None:
    """Raise one UserError listing every collected problem, so the user fixes them in one pass."""
    if len(problems) == 1:
        raise UserError(problems[0])
    if problems:
        raise UserError(f"{what}:\n" + "\n".join(f"  - {p}" for p in problems))
