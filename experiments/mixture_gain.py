"""Mixture drafters vs the product drafter and the oracle (see mfd_theory.commands.mixture_gain)."""

from mfd_theory.commands.mixture_gain import main

if __name__ == "__main__":
    main()
