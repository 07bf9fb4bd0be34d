"""Cache policies: one module per policy, each with its reference class and compiled kernel."""
