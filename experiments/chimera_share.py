"""Chimera share of product trees across synthetic families; writes results/chimera_share.json."""

from mfd_theory.commands.chimera_share import main

if __name__ == "__main__":
    main()
