"""How the harness writes a count in its messages and titles: "1 call", "2 calls" (never "1 calls")."""


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """`n` and the noun, singular for one: counted(1, "cycle") -> "1 cycle", counted(3, "run") -> "3 runs"."""
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"
