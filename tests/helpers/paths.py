"""Where the project and the tests' data are."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SAMPLE = ROOT / "data" / "LexPilot_sample.json"
DATA = (
    ROOT / "tests" / "data"
)  # frozen inputs: the paper's Appendix F text, runs saved by earlier releases, a CA
