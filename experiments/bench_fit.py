"""EM benchmark (see mfd_theory.commands.bench_fit)."""

from mfd_theory.commands.bench_fit import main

if __name__ == "__main__":
    main()
