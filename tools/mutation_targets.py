"""What tools/mutation.sh mutates, and a fingerprint of each target so that the survivor list cannot drift.

    python tools/mutation_targets.py --patterns           # the default patterns, one per line (mutation.sh reads them)
    python tools/mutation_targets.py --check              # exit 1 naming each target changed since its last clean run
    python tools/mutation_targets.py --record PATTERN...  # after a clean mutation run of PATTERN...: its fingerprints

Why (issue 43): `tools/mutation.sh` exited 1 on main with 36 survivors nobody had listed, because later commits
changed mutated functions and nobody re-ran the mutants. Each target (a whole module, or one function or method,
as mutmut names it) has a fingerprint (the sha256 of its syntax tree without docstrings: formatting and comments
do not count, code does) kept in docs/mutation-survivors.md. The self-test tests/selftest/test_mutation_drift.py
fails when a target's code changed since its fingerprint was recorded, naming the command that re-runs exactly
its mutants; mutation.sh records the fingerprints of the patterns it ran when it ends with no unexplained survivor.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SURVIVORS = ROOT / "docs" / "mutation-survivors.md"
HEADING = "## Fingerprints of the mutated code"

L, G = "suite.gate.latency.xǁ", "suite.gate.state.xǁ"
K = "suite.config.known_failures.xǁKnownFailureǁ"
A, B = "engines.artifacts.xǁModelBuildǁ", "engines.base.xǁ"
R, T = "engines.onnxrt.backend.xǁOnnxRuntimeBackendǁ", "engines.trt.settings.xǁBuildPlanǁ"
#: mutmut's names: ``module.*`` (every function of the module), ``module.x_FUNCTION__mutmut_*`` or
#: ``module.xǁCLASSǁMETHOD__mutmut_*``.
PATTERNS = [
    "suite.verdict.*",
    "metrics.parity.*",
    "metrics.parity_report.*",
    f"{L}LatencyOutcomeǁcomponent__mutmut_*", f"{L}LatencyChecksǁcheck_latency__mutmut_*",
    f"{L}LatencyChecksǁbusy_matters__mutmut_*", f"{G}Gateǁgated__mutmut_*", f"{L}LatencyChecksǁungated__mutmut_*",
    "suite.gate.latency.x_load_can_explain__mutmut_*",
    "suite.gate.baselines.x__refuse_copy__mutmut_*", "suite.gate.drift.xǁDriftChecksǁcheck_memory__mutmut_*",
    "metrics.drift.x_compare_memory__mutmut_*", "metrics.drift.x_has_memory_figure__mutmut_*",
    "metrics.drift.x__mib__mutmut_*", "metrics.drift.x_memory_grew__mutmut_*",
    "suite.config.options.x_check_rounds_option__mutmut_*",
    "engines.versions.x_version_of__mutmut_*", "engines.versions.x__imported__mutmut_*",
    "engines.artifacts.x__onnx_stage__mutmut_*", f"{A}traced__mutmut_*",
    f"{A}onnx_path__mutmut_*", f"{A}onnx_key__mutmut_*", f"{A}export_options_for__mutmut_*",
    f"{A}_export_parts__mutmut_*", f"{A}_fused_stage__mutmut_*", f"{A}_stage__mutmut_*",
    # the model digest every key grows from: weights, source and layers, and the module's non-parameter state
    f"{A}model_digest__mutmut_*", "engines.artifacts.x_module_state__mutmut_*",
    "engines.artifacts.x__state_value__mutmut_*", "engines.artifacts.x__qualname__mutmut_*",
    "engines.pytorch.backend.x_model_digest__mutmut_*", "engines.pytorch.backend.x__digest__mutmut_*",
    "core.inputs.xǁAxisRangeǁas_dict__mutmut_*", "core.inputs.xǁInputSpecǁas_key__mutmut_*",
    f"{B}ShapeProfileǁas_dict__mutmut_*",
    "engines.onnx.convert.x_convert_parts__mutmut_*", "engines.onnx.convert.x__block_list__mutmut_*",
    "engines.onnx.convert.x_fusion_parts__mutmut_*", "engines.onnx.convert.x_transformer_shape__mutmut_*",
    "engines.onnx.quantize.x_quantize_parts__mutmut_*",
    "engines.trt.settings.x_engine_cache_parts__mutmut_*", f"{T}as_dict__mutmut_*",
    "engines.inductor.backend.x_cache_parts__mutmut_*", "engines.inductor.backend.x__device_identity__mutmut_*",
    "engines.inductor.backend.x__compiler_identity__mutmut_*",
    f"{R}trt_cache_dir__mutmut_*", "engines.onnxrt.backend.x_trt_profile_options__mutmut_*",
    # the latency gate's statistics and rules (issue 43: every function that decides a verdict)
    "metrics.clocks.*", "metrics.latency.x_two_modes__mutmut_*",
    "suite.gate.bound.x_classify__mutmut_*", "suite.gate.bound.x_class_noise__mutmut_*",
    "suite.gate.bound.x_between_half__mutmut_*", "suite.gate.bound.x_gate_rule__mutmut_*",
    "suite.gate.bound.x_host_paced__mutmut_*", "metrics.host_pace.*",
    # a whole group of cases slower (issue 42): the group rule, and which cases count in which group
    "metrics.group_drift.*", f"{L}LatencyChecksǁgroup_drifts__mutmut_*",
    f"{L}LatencyChecksǁtake_group_drifts__mutmut_*",
    # the latency comparison: its rule (regression, improvement, unchanged, inconclusive) and what feeds it
    "metrics.regression.x_compare_latency__mutmut_*", "metrics.regression.x__batch_interval__mutmut_*",
    "metrics.regression.x__batch_medians__mutmut_*", "metrics.regression.x_between_night_deviations__mutmut_*",
    "metrics.regression.x_pooled_half_width__mutmut_*", "metrics.regression.x__as_runs__mutmut_*",
    "metrics.regression.x__samples__mutmut_*",
    # whether a known failure absorbs a failed figure, or the figure fell beyond its declared margin
    f"{K}covers__mutmut_*", f"{K}refusal__mutmut_*", f"{K}bound__mutmut_*", f"{K}beyond__mutmut_*",
    f"{K}expected_for__mutmut_*", "suite.hooks.known_failures_runtime.x__dataset__mutmut_*",
    "suite.config.known_failures.x_parity_failures_in__mutmut_*",
    # the states suite/hooks/verdict_wiring.py decides (the rest of it is pytest plumbing)
    "suite.hooks.verdict_wiring.xǁVerdictPluginǁ_strict_known_failures__mutmut_*",
    "suite.hooks.verdict_wiring.x__required_engines_judged__mutmut_*",
    "suite.hooks.verdict_wiring.x__engine_of__mutmut_*",
]

_NAMED = re.compile(r"^(?P<module>[\w.]+?)\.x(?:ǁ(?P<cls>\w+)ǁ|_)(?P<func>\w+?)__mutmut_\*$")


def resolve(pattern: str, root: Path = ROOT) -> tuple[Path, str | None]:
    """(source file, ``Class.method`` / ``function`` or None for the whole module) of a mutmut pattern."""
    if pattern.endswith(".*"):
        module, qualname = pattern[:-2], None
    else:
        match = _NAMED.match(pattern)
        if not match:
            raise ValueError(f"not a mutmut pattern this tool understands: {pattern}")
        module = match["module"]
        qualname = f"{match['cls']}.{match['func']}" if match["cls"] else match["func"]
    return root / (module.replace(".", "/") + ".py"), qualname


def _strip_docstrings(tree: ast.AST) -> ast.AST:
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
    return tree


def _find(tree: ast.Module, qualname: str) -> ast.AST | None:
    scope: list[ast.stmt] = tree.body
    found: ast.AST | None = None
    for part in qualname.split("."):
        found = next((n for n in scope if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                      and n.name == part), None)
        if found is None:
            return None
        scope = getattr(found, "body", [])
    return found


def fingerprint(pattern: str, root: Path = ROOT) -> str:
    """sha256 (12 hex digits) of the target's syntax tree without docstrings; ``missing`` where it is gone."""
    path, qualname = resolve(pattern, root)
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError):
        return "missing"
    node = tree if qualname is None else _find(tree, qualname)
    if node is None:
        return "missing"
    return hashlib.sha256(ast.dump(_strip_docstrings(node)).encode()).hexdigest()[:12]


def recorded(text: str) -> dict[str, str]:
    """The fingerprints kept in the survivor list: ``- fingerprint `PATTERN` sha256:HEX`` lines."""
    return dict(re.findall(r"^- fingerprint `([^`]+)` sha256:(\w+)$", text, flags=re.M))


def drifted(patterns: list[str], text: str, root: Path = ROOT) -> list[str]:
    """The patterns whose code differs from its recorded fingerprint (or that have none)."""
    kept = recorded(text)
    return [p for p in patterns if kept.get(p) != fingerprint(p, root)]


def record(patterns: list[str], text: str, root: Path = ROOT) -> str:
    """The survivor list with the fingerprints of ``patterns`` set to their code's now; the others kept."""
    kept = recorded(text)
    kept.update({p: fingerprint(p, root) for p in patterns})
    block = [HEADING, "",
             "Written by tools/mutation.sh after a run with no unexplained survivor, one line per pattern it ran;",
             "tests/selftest/test_mutation_drift.py fails when the code of a pattern no longer matches its line.", ""]
    block += [f"- fingerprint `{p}` sha256:{kept[p]}" for p in PATTERNS if p in kept]
    block += [f"- fingerprint `{p}` sha256:{h}" for p, h in sorted(kept.items()) if p not in PATTERNS]
    head = text.split(HEADING)[0].rstrip("\n")
    return head + "\n\n" + "\n".join(block) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--patterns", action="store_true", help="print the default patterns")
    group.add_argument("--check", action="store_true", help="exit 1 when a target changed since its clean run")
    group.add_argument("--record", nargs="+", metavar="PATTERN", help="record these patterns' fingerprints")
    args = parser.parse_args(argv)
    if args.patterns:
        print("\n".join(PATTERNS))
        return 0
    text = SURVIVORS.read_text(encoding="utf-8")
    if args.record:
        SURVIVORS.write_text(record(args.record, text), encoding="utf-8")
        return 0
    stale = drifted(PATTERNS, text)
    for pattern in stale:
        print(f"changed since its last clean mutation run: {pattern}\n  run: bash tools/mutation.sh '{pattern}'")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
