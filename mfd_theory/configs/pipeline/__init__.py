"""The configs of the own-target steps (distill, train-drafter, eval) and the target options they share."""
