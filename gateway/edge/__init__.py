"""The I/O both faces share: the common `GATEWAY_*` settings slice, the key file and the
salt secret, the poll of the entrypoint's control port, and building the shared pieces
from the settings."""
