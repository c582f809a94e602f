"""`python -m tracewatch`: the `tracewatch` command, for an environment whose scripts
folder is not on the PATH."""

import sys

from tracewatch.launch import main

sys.exit(main())
