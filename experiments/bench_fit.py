"""EM benchmark (see mfd_theory.experiments.bench_fit)."""

from mfd_theory.experiments.bench_fit import main

if __name__ == "__main__":
    main()
