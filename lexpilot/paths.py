"""Where the project's files are, declared once: the project root (where the scripts are, and the default
output root), the prompts, the data folder and the default datasets."""

from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
PROMPT_DIR = PROJECT_ROOT / "prompts"
DATA_DIR = PROJECT_ROOT / "data"
DEFAULT_OUTPUT_ROOT = PROJECT_ROOT  # results go next to the scripts unless --output-root says otherwise
