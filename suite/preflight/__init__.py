"""Start-up check of each selected model ("first contact"), before any engine is built: check.py makes and runs
each model once, datasets.py looks at its data sets, errors.py words what failed (one line per model), output.py
hides what the model prints meanwhile, weights.py notices weights that change between runs."""

from suite.preflight.check import CheckedModel, ModelSource, check_models, smoke_feed
from suite.preflight.errors import PreflightError, PreflightErrors, startup_message
from suite.preflight.output import PROGRESS_PREFIX, HiddenOutput, hidden_output
from suite.preflight.weights import WEIGHTS_FILE

__all__ = ["PROGRESS_PREFIX", "WEIGHTS_FILE", "CheckedModel", "HiddenOutput", "ModelSource", "PreflightError",
           "PreflightErrors", "check_models", "hidden_output", "smoke_feed", "startup_message"]
