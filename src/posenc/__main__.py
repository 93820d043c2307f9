"""``python -m posenc card PATH [--json] [--strict]``: print the position card of a
model's ``config.json`` (or ``.gguf`` file) as a terminal table (at most 100 columns),
or as JSON (:func:`posenc.card.position_card`); ``--strict`` makes any finding an exit
status of 1, for a CI check of one's own configs."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status: 0, 1 with ``--strict`` when the
    card has findings (printed as usual), 2 for a config that cannot be read (the
    reason on stderr)."""
    parser = argparse.ArgumentParser(
        prog="python -m posenc", description="posenc's command-line tools"
    )
    commands = parser.add_subparsers(dest="command", required=True)
    card = commands.add_parser(
        "card", help="what a model's config does to positions (a position card)"
    )
    card.add_argument("path", help="a config.json, a folder holding one, or a .gguf")
    card.add_argument("--json", action="store_true", help="print the card as JSON")
    card.add_argument(
        "--strict", action="store_true", help="exit with 1 when the card has findings"
    )
    args = parser.parse_args(argv)
    from .card import position_card

    try:
        result = position_card(args.path)
    except (OSError, ValueError, TypeError, ImportError) as err:
        print(f"posenc card: {err}", file=sys.stderr)
        return 2
    print(result.to_json() if args.json else result.to_text(), end="")
    return 1 if args.strict and result.warnings else 0


if __name__ == "__main__":
    sys.exit(main())
