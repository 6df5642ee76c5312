"""--verify DIR (being written)."""


def verify_export(folder) -> int:
    raise NotImplementedError
