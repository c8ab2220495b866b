"""``suite.toml``: the models, engines, precisions and thresholds under test, declared, not coded.

Why strict: a typo in a nightly gating config must not silently drop a model or loosen a threshold,
so every key is checked for its type and value when the file is read, and every mistake is one
``ConfigError`` that names the key (``[models.digits_cnn].batch_sizes[0]``), the value, and what is
valid; never a traceback from deep inside an engine, and never a setting that is read and ignored.

One module per job; this package re-exports what the rest of the suite imports, so ``from suite.config import X``
keeps working. They import one way (no cycle), and none of them imports from this package:

- ``known_failures``: ``KnownFailure`` and the rules of which failure it may absorb.
- ``schema``: the dataclasses a checked config is (``SuiteConfig``, ``ModelConfig``...), ``ConfigError``.
- ``validate``: the typed-value readers (``read_int``, ``check_keys``...) every TOML table goes through.
- ``defaults``: the thresholds each precision starts from, and which of a model's differ from them.
- ``user_code``: importing a ``package.module:callable`` the config names, blaming the user's line.
- ``options``: command-line values checked against the config (``--latency-batch-sizes``, ``--latency-rounds``).
- ``parse``: ``load_config``/``parse_config``, the file's layout: TOML in, ``SuiteConfig`` out.
- ``model``: one ``[models.NAME]`` table into a ``ModelConfig`` (``MIN_OPSET``, ``MAX_BATCH_INPUT_BYTES``).
- ``shapes``: a model's inputs, named axes and latency shapes.
- ``excuses``: a model's known failures and unsupported cells.
- ``overrides``: ``[precision.P]``, ``[int8]``, ``[engine_options.ENGINE]``, at the top and in a model.
"""

from suite.config.defaults import threshold_changes
from suite.config.known_failures import (
    ACCURACY_METRICS,
    KNOWN_FAILURE_CANARIES,
    KNOWN_FAILURE_CHECKS,
    KNOWN_FAILURE_METRICS,
    NEVER_KNOWN,
    FailedFigures,
    FailedValues,
    KnownFailure,
    accuracy_failed_metric,
    parity_failures_in,
)
from suite.config.model import MAX_BATCH_INPUT_BYTES, MIN_OPSET
from suite.config.options import check_rounds_option, parse_batch_sizes_option
from suite.config.parse import load_config, parse_config
from suite.config.schema import (
    CALIBRATION_METHODS,
    ENGINES,
    EXECUTION_PROVIDERS,
    INPUT_DTYPES,
    REQUIREMENTS,
    TRANSFORMER_FUSIONS,
    ConfigError,
    Int8Options,
    LatencyOptions,
    LatencyShape,
    ModelConfig,
    SuiteConfig,
)
from suite.config.user_code import resolve, short_path, where_in_user_code

__all__ = [
    "ACCURACY_METRICS",
    "CALIBRATION_METHODS",
    "ENGINES",
    "EXECUTION_PROVIDERS",
    "INPUT_DTYPES",
    "KNOWN_FAILURE_CANARIES",
    "KNOWN_FAILURE_CHECKS",
    "KNOWN_FAILURE_METRICS",
    "MAX_BATCH_INPUT_BYTES",
    "MIN_OPSET",
    "NEVER_KNOWN",
    "REQUIREMENTS",
    "TRANSFORMER_FUSIONS",
    "ConfigError",
    "FailedFigures",
    "FailedValues",
    "Int8Options",
    "KnownFailure",
    "LatencyOptions",
    "LatencyShape",
    "ModelConfig",
    "SuiteConfig",
    "accuracy_failed_metric",
    "check_rounds_option",
    "load_config",
    "parity_failures_in",
    "parse_batch_sizes_option",
    "parse_config",
    "resolve",
    "short_path",
    "threshold_changes",
    "where_in_user_code",
]
