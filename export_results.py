"""Write saved runs as other tools read them, or check such an export; never calls an API.

--format eee writes Every Eval Ever (schema 0.3) records: an aggregate per model and run, and its instance records,
one per consultation of every stage. --format inspect writes an Inspect log per model, run and stage (`inspect
view` opens them).
--verify DIR recomputes Table 2 (LCA, DCG by class) and Table 3 (the LJP setups) from an export alone, prints them
as show_results.py does, and exits 1 on any difference from the values the export states. docs/export.md maps
every field to its source.
"""

from __future__ import annotations

import argparse
import os
import sys

from lexpilot.errors import OneLineParser, leave_quietly_on_interrupt, run_tool

leave_quietly_on_interrupt(os.path.dirname(os.path.abspath(__file__)))  # before the imports that take time

from lexpilot.errors import HarnessError, UsageError
from lexpilot.reporting.export.command import add_export_options, export


def main(argv=None) -> int:
    parser = OneLineParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_export_options(parser)
    args = parser.parse_args(argv)
    try:
        return export(args)
    except (UsageError, HarnessError) as e:
        print(f"export_results: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(run_tool(main, "export_results"))
