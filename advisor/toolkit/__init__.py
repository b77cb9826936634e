"""The knowledge-base toolkit: the building blocks every knowledge base (built-in or plugin) shares.

A knowledge base reads the normalized model (``ctx.profile``, ``ctx.graph``) and answers with findings; what
several of them need is here, stated once, so two knowledge bases never measure the same thing two ways:

- :mod:`advisor.toolkit.time` -- the rank's time model (window, steps, compute / communication / free), the
  pseudo-ops that savings of idle and communication time are attributed to, and vectorized row selection.
- :mod:`advisor.toolkit.common` -- tensor descriptions (formats, dtypes, shapes), stream-ordered neighbours in
  the ops table, graph walks that skip pass-through ops, severity from a share, "similar op" duration estimates.
- :mod:`advisor.toolkit.graph_patterns` -- op-chain patterns matched on the model graph (networkx VF2), fused
  markers, constant values, the recorded ATC command line.
- :mod:`advisor.toolkit.advice` -- advice fitted to the run: the framework family of the execution context,
  per-family advice texts from a rules file, whether an ATC option exists for the run's CANN release and chip.
- :mod:`advisor.toolkit.bound` -- the one op classification (compute / memory / latency / no clear bound from
  arithmetic intensity against the chip's ridge, pipe ratios as evidence, share of the practical roof and
  recoverable time), computed once per rank: ``op_bounds(ctx)``. No knowledge base classifies ops on its own.
- :mod:`advisor.toolkit.costmodel` -- FLOPs and bytes of an op against the chip's peaks (the cost model behind the
  bound classification and the static audit).
- :mod:`advisor.toolkit.model_summary` -- the rank's cube / vector work and memory traffic (the report's
  ``model_summary``).
- :mod:`advisor.toolkit.cores` -- the chip's core counts (info.json, platform, or inferred from block dims) and
  the share of the core slots each task's blocks fill.
- :mod:`advisor.toolkit.tuning` -- operator-level advice fitted to the run: operator tuning (AOE) the way the
  execution context has it (or None), fusion and batching per flow, 16-bit dtypes the chip offers.
- :mod:`advisor.toolkit.peers` -- the peers of a rank's collectives: group members, which the analysis holds, the
  peer the notify waits say the collectives waited for (held / held alone), and the findings naming a late peer
  outside the analysis, for the communication (one rank) and cluster (several ranks) knowledge bases alike.
- :mod:`advisor.toolkit.sequences` -- whether two op patterns are one fusion opportunity (same, rotation,
  sub-sequence).
- :mod:`advisor.toolkit.run_context` -- on top of it: whether a rule applies to the run's context (and the note
  when not), the stated assumption for an unknown context, the 16-bit dtype the chip allows, recorded settings.

No knowledge base imports another knowledge base's module; anything two of them share belongs here.

Part of the plugin API (``advisor.hookspecs.API_VERSION`` covers it; docs/plugins.md). May import the model,
:mod:`advisor.kb`, :mod:`advisor.graph`, :mod:`advisor.ingest` (normalization helpers), :mod:`advisor.config` and
:mod:`advisor.common`; never the engine, a knowledge base or a later stage.
"""
