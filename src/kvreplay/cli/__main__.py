"""python -m kvreplay.cli"""

import sys

from . import main

sys.exit(main())
