"""sparkserve gateway: a thin OpenAI-compatible front for vLLM, with two faces.

Auth, per-tenant cache salts, prefix-stable prompt layout, admission control and
metrics in front of vLLM.

- `gateway.core`: the request handling itself, with no I/O of its own (preparation
  and prompt layout, header rules, tenancy, admission, SSE, metrics, errors);
- `gateway.edge`: the I/O both faces share (the common settings slice, the key file
  and the salt secret, the poll of the entrypoint's control port, building the shared
  pieces);
- `gateway.standalone`: the proxy in front of one or more vLLMs, `python -m gateway`
  or `gateway.app:create_app`;
- `gateway.embedded`: the middleware inside vLLM's API server,
  `--middleware gateway.embedded.EmbeddedGateway`.
"""
