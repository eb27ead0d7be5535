"""Training drafts by distillation: the training corpus, the benchmark tasks (split for good into bench, dev
and train prompts), the target-labelled data, losses, the train loop."""
