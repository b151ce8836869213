"""Shared by the Python tests: puts python/ on sys.path."""

import os
import sys

PYDIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if PYDIR not in sys.path:
    sys.path.insert(0, PYDIR)
