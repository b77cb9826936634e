"""One analysis run, start to end: ranks read and analyzed (in process or on Dask), the graph joined, the static
audit, root causes and their symptoms, waivers, the score, the consistency checks and the report dictionary.

May import every earlier stage (common, config, core, ingest, graph, the plugin API and toolkit, engine). Never a
renderer (:mod:`advisor.report`), ``compare``, ``fix`` or the CLI.
"""
