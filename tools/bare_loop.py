"""Bare reference loops, outside the suite, to check that the suite's GPU figures are faithful.

Measures ResNet-50 fp16 (the same fixture weights the suite uses) the plainest way: torch eager
channels-last, a torch CUDA graph replay, and ONNX Runtime's CUDA EP with IO binding; CUDA-event
timing for torch, a synchronizing host timer for ONNX Runtime; medians after warm-up. Compare its
JSON with the suite's --suite-results records of the same paths.

    python tools/bare_loop.py --out bare.json [--batches 1,32,256] [--onnx PATH_TO_FP16_ONNX]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from core.cache import ArtifactCache
from suite.environment import fingerprint

ROUNDS, WARMUP = 100, 20


def _events_loop(fn, rounds=ROUNDS, warmup=WARMUP):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(rounds + warmup):
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return times[warmup:]


def _host_loop(fn, rounds=ROUNDS, warmup=WARMUP):
    times = []
    for _ in range(rounds + warmup):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return times[warmup:]


def _entry(path, batch, times_ms):
    median = statistics.median(times_ms)
    return {"path": path, "batch_size": batch, "median_ms": median, "p99_ms": float(np.percentile(times_ms, 99)),
            "throughput_per_s": batch / (median / 1e3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="bare.json", help="JSON file of the bare-loop medians (default bare.json)")
    parser.add_argument("--batches", default="1,32,256", help="batch sizes, comma-separated (default 1,32,256)")
    parser.add_argument("--cache", default=".engine-cache", help="engine cache (default .engine-cache)")
    parser.add_argument("--onnx", default=None, help="fp16 ONNX of the same model for the ONNX Runtime loop")
    args = parser.parse_args()
    from fixtures.models.vision import resnet50

    model = resnet50(ArtifactCache(args.cache)).cuda().half().to(memory_format=torch.channels_last).eval()
    results = []
    for batch in (int(b) for b in args.batches.split(",")):
        x = torch.randn(batch, 3, 224, 224, device="cuda").half().contiguous(memory_format=torch.channels_last)
        with torch.inference_mode():
            results.append(_entry("torch-eager-channels-last", batch, _events_loop(lambda x=x: model(x))))
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(3):
                    model(x)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                model(x)
            results.append(_entry("torch-cuda-graph", batch, _events_loop(graph.replay)))
        if args.onnx:
            import onnxruntime as ort

            session = ort.InferenceSession(args.onnx, providers=["CUDAExecutionProvider"])
            binding = session.io_binding()
            value = ort.OrtValue.ortvalue_from_numpy(np.random.randn(batch, 3, 224, 224).astype(np.float32), "cuda", 0)
            binding.bind_ortvalue_input(session.get_inputs()[0].name, value)
            binding.bind_output(session.get_outputs()[0].name, "cuda", 0)
            results.append(_entry("onnxruntime-cuda-iobinding", batch,
                                  _host_loop(lambda s=session, b=binding: s.run_with_iobinding(b))))
        print(json.dumps(results[-3:] if args.onnx else results[-2:]), flush=True)
    Path(args.out).write_text(json.dumps({"environment": fingerprint("cuda:0"), "model": "resnet50 fp16",
                                          "results": results}, indent=1))


if __name__ == "__main__":
    main()
