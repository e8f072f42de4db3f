"""``python -m spmdrules.verify``: see :func:`spmdrules.verify.main`."""

import sys

from spmdrules.verify import main

sys.exit(main())
