"""Fine-tuning the shared encoder: recipe, batches, loss, hard-negative mining, validation, distribution, the loop."""
