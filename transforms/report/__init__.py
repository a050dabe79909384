"""A run's report.html: one self-contained page made from its manifest, diff.json and bounded table samples."""
