"""``python -m spmdrules.verify``: see :func:`spmdrules.verify.cli.main`."""

import sys

from spmdrules.verify.cli import main

sys.exit(main())
