"""sparkserve gateway: a thin OpenAI-compatible front for vLLM.

Auth, per-tenant cache salts, prefix-stable prompt layout, admission control and
metrics in front of one vLLM.  Build it with `gateway.app.create_app(settings)`;
run it with `python -m gateway`.
"""
