import pathlib
import sys

# Make the repo importable when pytest runs from a checkout without install.
_ROOT = pathlib.Path(__file__).resolve().parents[2]
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))
