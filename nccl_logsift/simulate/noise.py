"""Output a training job writes besides NCCL and PyTorch errors: warnings, progress lines, tqdm bars.

All text is composed here (no line is taken from a real log); it only has to look like what shares
the stream with NCCL in practice, so that a parser meets it.
"""

from __future__ import annotations

import math
import random

_BAR = " ▏▎▍▌▋▊▉█"


def python_warnings(site: str, rng: random.Random) -> list[str]:
    """Two Python warnings as ``warnings.warn`` prints them (file:line: Category: message, then the source
    line)."""
    picks = [
        (
            f"{site}/torch/cuda/amp/grad_scaler.py",
            "FutureWarning",
            "`torch.cuda.amp.GradScaler(args...)` is deprecated. "
            "Please use `torch.amp.GradScaler('cuda', args...)` instead.",
        ),
        (
            "/workspace/model/attention.py",
            "UserWarning",
            f"fused attention kernel unavailable for head_dim={rng.choice((80, 96, 112))}; "
            "falling back to the reference implementation",
        ),
        (
            "/workspace/data/loader.py",
            "UserWarning",
            f"dataset shard index is {rng.randrange(2, 9)} days older than the shards; rebuilding lazily",
        ),
    ]
    out = []
    for path, category, message in rng.sample(picks, 2):
        out.append(f"{path}:{rng.randrange(40, 400)}: {category}: {message}")
        out.append("  warnings.warn(")
    return out


def config_lines(world: int, tp: int, pp: int, dp: int, steps: int, rng: random.Random) -> list[str]:
    params = rng.choice(("1.3B", "2.7B", "6.7B", "13B"))
    return [
        f"> initialized distributed: world_size={world} tensor_parallel={tp} "
        f"pipeline_parallel={pp} data_parallel={dp}",
        f"> building model ({params} parameters), micro_batch_size=2, global_batch_size={2 * dp * 8}",
        f"> training for {steps} steps",
    ]


def progress_line(step: int, total: int, ms: float, rng: random.Random) -> str:
    loss = 2.1 + 8.0 * math.exp(-step / 150.0) + rng.uniform(-0.05, 0.05)
    lr = 3e-4 * min(1.0, (step + 1) / 50.0)
    return (
        f"step {step + 1:>6}/{total} | loss {loss:.4f} | lr {lr:.3e} | grad_norm {rng.uniform(0.4, 2.5):.3f} "
        f"| {ms:8.1f} ms/step"
    )


def tqdm_bar(n: int, total: int, elapsed: float, desc: str = "train") -> str:
    frac = n / total if total else 1.0
    full = int(frac * 10)
    part = int((frac * 10 - full) * 8)
    bar = "█" * full + (_BAR[part] if full < 10 else "")
    bar = bar.ljust(10)
    rate = n / elapsed if elapsed > 0 else 0.0
    remaining = (total - n) / rate if rate else 0.0
    return (
        f"{desc}: {int(frac * 100):3d}%|{bar}| {n}/{total} "
        f"[{_clock(elapsed)}<{_clock(remaining)}, {rate:5.2f}it/s]"
    )


def _clock(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60:02d}:{s % 60:02d}"
