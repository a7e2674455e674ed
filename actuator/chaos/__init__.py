"""`gpu-reclaimer chaos`: the whole loop under many faults at once, judged against the
simulated node's ground truth.

`plan` draws a seeded workload mix and fault schedule (pure), `truth` records what each
simulated process really did, `faults` injects each fault, `oracle` judges every signal
against the truth (pure), `run` drives one run, and `report` writes its Markdown and JSON."""
