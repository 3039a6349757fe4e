"""Speed of the tree builders and the Monte Carlo walk (see mfd_theory.commands.bench_trees)."""

from mfd_theory.commands.bench_trees import main

if __name__ == "__main__":
    main()
