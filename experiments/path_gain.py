"""Product vs mixture vs path-dependent draft trees (see mfd_theory.commands.path_gain)."""

from mfd_theory.commands.path_gain import main

if __name__ == "__main__":
    main()
