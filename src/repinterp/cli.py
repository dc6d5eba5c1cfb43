"""The `repinterp` command."""


def main() -> None:
    raise SystemExit("repinterp: not built yet")
