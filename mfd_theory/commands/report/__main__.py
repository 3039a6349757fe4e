"""``python -m mfd_theory.commands.report``: the same command as ``mfd report``.

Every command module runs this way; the report, being a package, needs this file for it.
"""

import sys

from mfd_theory.commands.report.command import main

sys.exit(main())
