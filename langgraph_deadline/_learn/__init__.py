"""The latency book: what each step really takes, learned from its records."""
