"""hwsel: hardware selection and performance prediction from hwbench runs (in progress, issue 4)."""

__all__: list[str] = []
