"""The torch halves of the benchmarks (``mfd bench decode``, ``draft``, ``batch``, ``gpu-check``) and their shapes."""
