"""The drivers of the experiment commands (``mfd e2e``, ``natural``, ``own-target``, ``real``, ``real-drafters``)."""
