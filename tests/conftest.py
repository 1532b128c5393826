import sys
from pathlib import Path

# tests/unit/core holds the pure simulation harness (sim.py) the core tests import.
sys.path.insert(0, str(Path(__file__).parent / "unit" / "core"))
