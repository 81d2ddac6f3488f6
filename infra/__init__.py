"""The trainstack Pulumi program, its stack config, GCP catalog, offline plan and CLI."""

import warnings
from pathlib import Path

from trainstack import _portions

# google.api_core announces on import that it will drop Python 3.11 in 2027; nothing a user
# running `trainstack plan` can act on, so it is silenced here, before anything imports it.
warnings.filterwarnings("ignore", message="You are using a Python version", category=FutureWarning)


if __name__ != "trainstack.infra":  # one import name per module: two would copy every class
    raise ImportError(f"import trainstack.infra, not {__name__}")

# A second folder named trainstack on sys.path (trainstack/_portions.py).
_portions.check(Path(__file__).parent.parent)
