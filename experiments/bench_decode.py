"""Decoding benchmark: per-component time split, tokens/s per method, verify-latency profile.

    python experiments/bench_decode.py [--preset tiny] [--budget 64] [--target-dir DIR --drafter-dir DIR]
"""

from mfd_theory.commands.bench_decode import main

if __name__ == "__main__":
    main()
