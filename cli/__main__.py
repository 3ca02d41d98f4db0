"""``python -m prefill_delayer.cli``: the same as the ``prefill-delayer`` command."""

import sys

from . import main

sys.exit(main())
