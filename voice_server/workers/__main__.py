"""``python -m voice_server.workers STAGE FD``: a model worker process (see child.py)."""

import sys

from .child import main

main(sys.argv[1:])
