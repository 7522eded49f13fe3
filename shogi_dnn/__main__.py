"""`python -m shogi_dnn` is the same as the `shogi-dnn` console script."""

import sys

from shogi_dnn.cli import main

sys.exit(main())
