"""``kdrsdl evaluate``'s command-line body: arguments in, the table, JSON and report out.

Exit status: 0; 2 for a malformed dataset or an unknown method or range (one line naming the
file or value); 78 (EX_CONFIG) for a ``--config`` file that does not load, as every other
subcommand.
"""

import argparse
import json
import os
import sys

from streamer.config import EX_CONFIG, ConfigError, load
from streamer.evaluation.cdnet import DatasetError
from streamer.evaluation.protocols import evaluate
from streamer.evaluation.report import format_table


def main(args: argparse.Namespace) -> int:
    """CLI body: returns the exit status (module docstring)."""
    model = None
    if getattr(args, "config", None):
        try:
            model = load(args.config).model.params()
        except ConfigError as exc:
            print(f"kdrsdl: configuration error: {exc}", file=sys.stderr)
            return EX_CONFIG
    try:
        methods = [m.strip() for m in args.methods.split(",")] if args.methods else None
        result = evaluate(args.dataset, args.protocol, methods, args.frames, args.sweep, args.report, model)
    except (DatasetError, ValueError) as exc:
        print(f"kdrsdl evaluate: {exc}", file=sys.stderr)
        return 2
    print(format_table(result))
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2, default=float)
    return 0
