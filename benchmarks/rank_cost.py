"""Worker-side CPU per rank: ranks of a generated cluster analyzed in one warm process (issue 33).

``python benchmarks/rank_cost.py [--data DIR] [--ranks K] [--repeat R] [--profile N]`` analyzes one rank to warm
up (imports, rules, knowledge-base discovery: paid once per worker process), then times ``K`` further ranks
``R`` times with CPU time (``time.process_time``) and prints the median milliseconds per rank. ``--profile N``
instead prints the ``N`` largest cProfile entries by cumulative and by own time over one pass of the ``K`` ranks.
The data is the cluster ``benchmarks/gen_cluster.py`` writes (``cluster_scale.py`` generates it under ``_data``).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import time
from pathlib import Path

from advisor import ingest
from advisor.pipeline.analysis import AnalysisOptions, analyze_rank, load_rules, select_kbs

HERE = Path(__file__).resolve().parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=HERE / "_data" / "cluster_64")
    parser.add_argument("--ranks", type=int, default=32)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--profile", type=int, default=0, metavar="N")
    args = parser.parse_args()

    opts = AnalysisOptions()
    rules, infos = load_rules(opts), select_kbs(opts)
    sources = ingest.detect(args.data)
    picked = sources[1 : args.ranks + 1]

    def one(src) -> None:
        analyze_rank(src, None, infos, rules, None, None, ranks_in_input=len(sources))

    one(sources[0])  # warm-up
    if args.profile:  # the knowledge bases run inline, so the profiler sees inside them (they run in threads)
        from advisor.engine import kb_engine

        kb_engine._run_with_limit = lambda cls, ctx, limit: list(cls().analyze(ctx) or [])
        prof = cProfile.Profile()
        prof.enable()
        for src in picked:
            one(src)
        prof.disable()
        stats = pstats.Stats(prof)
        for key in ("cumulative", "tottime"):
            stats.sort_stats(key).print_stats(args.profile)
        return
    samples = []
    for _ in range(args.repeat):
        t = time.process_time()
        for src in picked:
            one(src)
        samples.append(1000 * (time.process_time() - t) / len(picked))
    print(f"ranks={len(picked)} repeat={args.repeat} ms/rank median={statistics.median(samples):.1f} "
          f"samples={[round(s, 1) for s in samples]}")


if __name__ == "__main__":
    main()
