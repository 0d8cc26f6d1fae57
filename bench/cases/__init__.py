"""The benchmark cases: overhead (with LiteLLM), the mock check, the agent sessions."""
