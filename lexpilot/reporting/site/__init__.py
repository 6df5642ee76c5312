"""The static site (`show_results.py --html`): the overview, the case list, case pages, transcripts, the exact calls and the comparison page."""
