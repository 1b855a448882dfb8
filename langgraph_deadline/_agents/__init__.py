"""Models and agents: `budgeted_model` and `DeadlineMiddleware` for `create_agent`."""
