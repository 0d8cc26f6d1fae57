"""End to end on a real model: llama.cpp serving Gemma 3 270M behind the proxy (`make e2e`)."""
