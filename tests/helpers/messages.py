"""What the harness says when it refuses: one line, never a traceback."""


def one_line(err: str) -> str:
    """The line an error says, checked to be the only one (progress lines and notes aside)."""
    lines = [
        line for line in err.strip().splitlines() if "done, " not in line and not line.startswith("note:")
    ]
    assert "Traceback" not in err and 1 <= len(lines) <= 2, err
    return lines[-1]
