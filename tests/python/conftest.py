"""pytest setup: the oracle (reference_layer.py) is imported from this folder; the package is
imported from the build tree (PYTHONPATH=BUILD/python, as ctest's python_tests sets it) or
from an installed wheel."""

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
