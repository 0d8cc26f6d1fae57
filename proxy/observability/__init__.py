"""What the proxy tells the people running it: Prometheus metrics and structured logs.

`metrics` is the only module that knows prometheus-client; `logs` formats every log line of
the process (ours and uvicorn's) as one JSON object, or as text.
"""
