"""The grid (run_grid.py): cells, set-up, the grid file, the display, the grid's quote, a run's chain, the pool."""
