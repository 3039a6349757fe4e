"""Drafting round cost vs context length and K (shared-context drafter beside its first version).

    python experiments/bench_draft.py [--preset micro] [--contexts 128,4096] [--modes 1,4] [--repeats 3]
"""

from mfd_theory.commands.bench_draft import main

if __name__ == "__main__":
    main()
