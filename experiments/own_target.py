"""Your own target, small: distill -> train-drafter K = 1, 2 -> eval on the e2e micro target.

    python experiments/own_target.py --out DIR   (same as ``mfd own-target``)
"""

from mfd_theory.commands.own_target import main

if __name__ == "__main__":
    main()
