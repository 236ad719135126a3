"""`python -m jaxdata ...` runs the `jaxdata` command."""

import sys

from jaxdata.cli import main

sys.exit(main())
