"""End to end: train a small Qwen3 target, product and MFD drafters; measure acceptance and speedup.

    python experiments/e2e.py --preset {micro,default} --out DIR   (same as ``mfd e2e``)
"""

from mfd_theory.commands.e2e import main

if __name__ == "__main__":
    main()
