"""The standalone gateway: an OpenAI-compatible proxy in front of one or more vLLMs
(`python -m gateway`, `gateway.app:create_app`)."""
