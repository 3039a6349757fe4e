"""Check the 2^(m-1) - 1 chimera bound; writes results/chimera_bound.json (see the module)."""

from mfd_theory.commands.chimera_bound import main

if __name__ == "__main__":
    main()
