"""Two analysis runs (or saved reports) compared: device time, op types, rules, findings, score, kernels across tuning
rounds, and whether the new one regressed.

May import the pipeline (to analyze a profile given in place of a saved report), :mod:`advisor.report` (to load a
saved report) and every earlier stage.
"""
