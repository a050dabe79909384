"""The study's evaluation: datasets, metrics, the grid, its features and its report."""
