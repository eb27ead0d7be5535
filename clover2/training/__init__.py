"""Training drafts by distillation: the training corpus, the target-labelled data, losses, the train loop."""
